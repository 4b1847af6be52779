"""The service-account controllers' pure cores (kube-controller-manager's `serviceaccount` and
`root-ca-cert-publisher`).

accounts  every active namespace has the `default` ServiceAccount (serviceaccounts_controller.go)
rootca    every active namespace has the `kube-root-ca.crt` ConfigMap holding the server's CA
          (certificates/rootcacertpublisher/publisher.go)

May import: controllers.common and core. Never another controller, admission, auth or daemonkit.
"""
