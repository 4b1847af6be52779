"""RBAC (rbac.authorization.k8s.io/v1): rule matching (rules), the policy every cluster starts
with (bootstrap), the index over Roles, ClusterRoles and their bindings that answers `authorize`
without rescanning every binding (index), and the kinds' defaulting and validation for the
registry (validation). Objects are the API's plain dicts.

May import: the auth modules below it in auth's contract (attributes, request, pki, kubeconfig,
encryption, redact, protobuf, user, files), core, daemonkit; not requestinfo, tokenfile, x509 or
serviceaccount beside it, nor anything above.
"""
