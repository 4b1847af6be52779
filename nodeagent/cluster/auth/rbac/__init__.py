"""RBAC (rbac.authorization.k8s.io/v1): rule matching (rules), the policy every cluster starts
with (bootstrap), the index over Roles, ClusterRoles and their bindings that answers `authorize`
without rescanning every binding (index), and the kinds' defaulting and validation for the
registry (validation). Objects are the API's plain dicts."""
