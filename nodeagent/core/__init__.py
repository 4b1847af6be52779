"""The shared vocabulary of the agent and the control plane: pure values and functions, no I/O.

quantity (Kubernetes resource.Quantity, exact), names (DNS-1123), duration (Go durations),
errors (field errors), clock (injectable time), timefmt (metav1.Time), model/ (Pod manifests:
parsing, defaulting, validation), qos (QoS class, criticality, oom_score_adj), resources (pod
requests and limits, cpu shares/weight/quota, admission fit), tolerations (taints and
Toleration.ToleratesTaint), wellknown (label, annotation, condition and taint names both sides use),
expansion ($(VAR) references), downward (a container's environment from its pod: downward API,
ConfigMap/Secret keys, envFrom), selectors (label and field selectors, parsed and matched).

May import: the standard library and third-party libraries only; nothing else of nodeagent.
"""
