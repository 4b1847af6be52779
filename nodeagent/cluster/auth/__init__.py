"""The control plane's security pieces: who is calling (authentication), may they (authorization),
the certificates the server serves and trusts, and Secrets encrypted at rest.

    reviews         SubjectAccessReview, SelfSubjectAccessReview, LocalSubjectAccessReview,
                    SelfSubjectRulesReview, SelfSubjectReview (`kubectl auth can-i`, `whoami`),
                    TokenReview
    tokenrequest    the TokenRequest API: service-account tokens, bound to a pod if asked
    impersonation   kubectl --as: running as another user when allowed to impersonate it
    escalation      nobody grants through RBAC objects what they do not hold (escalate, bind)
    authenticator   the request authenticator chain (x509, token file, signed tokens, anonymous)
    authorizer      the authorizer chain (system:masters, Node, RBAC) and its protocol
    node            the Node authorizer and the graph of what each node's pods reference
    rbac/           RBAC: rule matching, the bootstrap policy, the index kept current by watches
    tokenfile       kube-apiserver's static token file (CSV)
    x509            client certificates: CN = user, O = groups
    serviceaccount  signed bearer tokens (JWT) for service accounts and node agents
    requestinfo     an HTTP request's authorization attributes (verb, group, resource, ...)
    attributes      the authorization attributes, decisions and the 401/403 Status bodies
    request         what a request offers to authenticate: headers and the verified peer cert
    protobuf        the review kinds as kubectl posts them (Kubernetes protobuf), decoded to dicts
    pki             the CA, the serving certificate and client certificates on disk
    kubeconfig      a kubeconfig for kubectl (server, CA, token or client certificate)
    encryption      EncryptionConfiguration: Secrets encrypted at rest (aesgcm, secretbox)
    redact          Secret values and credentials kept out of log lines
    config          the server config keys these pieces read (kube-apiserver flag names)
    user            UserInfo and the well-known user and group names
    files           private files written atomically (keys, certificates)

Everything but pki, files and the loaders of tokenfile/encryption is pure: values in, values out,
no I/O, time from nodeagent.core.clock. The API server wires it: it authenticates each request
with `Authenticator.authenticate`, turns the request into `Attributes` (requestinfo), asks the
`Authorizer`, and answers 401/403 with the Status bodies of `attributes`.

May import: core, daemonkit. Nothing else of the control plane (an inner contract keeps the order).
"""
