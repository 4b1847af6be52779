"""RBAC (rbac.authorization.k8s.io/v1): rule matching (rules), the policy every cluster starts
with (bootstrap), and the index over Roles, ClusterRoles and their bindings that answers
`authorize` without rescanning every binding (index). Objects are the API's plain dicts."""
