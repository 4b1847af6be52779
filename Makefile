# nodeagent: the two commands a new user needs are `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LINT_VENV := .venv-lint
CONFIG ?= config/nodeagent.yaml
# Short tracebacks: CI's record keeps only part of a long log, and a failure's E lines must be in it
PYTEST_IT := -q -p no:cacheprovider --durations=30 --tb=short
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo yes)

.PHONY: install run check-config lint test test-host test-v2 unit unit-kube unit-rest integration integration-v2 integration-v2-a integration-v2-b integration-container bench bench-agent bench-scheduler bench-images bench-storage bench-apiserver bench-autoscaling bench-cluster install-systemd clean

install: $(VENV)/.installed

## The agent's venv holds the runtime and the test tools only. The lint tools live in their own
## venv: import-linter brings rich, which structlog then imports into every daemon (+4.7 MiB RSS).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

$(LINT_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/pip install -q --upgrade pip
	$(LINT_VENV)/bin/pip install -q -e '.[test,lint]'
	touch $@

## Validate the config and start the agent on it (Ctrl-C stops it; pods are left to be re-adopted).
run: install
	$(BIN)/nodeagent check-config --config $(CONFIG) > /dev/null
	$(BIN)/nodeagent run --config $(CONFIG)

check-config: install
	$(BIN)/nodeagent check-config --config $(CONFIG)

## Import contracts (import-linter), lint (ruff) and types (mypy); CI runs it before the tests.
lint: $(LINT_VENV)/.installed
	$(LINT_VENV)/bin/lint-imports
	$(LINT_VENV)/bin/ruff check .
	$(LINT_VENV)/bin/mypy

## Unit tests; as root also the integration suites on the host kernel (cgroup v1 here) and in two
## User-Mode-Linux guests with pure cgroup v2. As root two lanes share the 2 cores, each suite
## printed whole when it ends, every suite run to its end before a failure is reported:
##   lane 1: most unit tests that drive a real server with kubectl (tests/test_kube_*.py), then
##           the host's integration suite;
##   lane 2: the two guests (one virtual CPU each), then the rest of the unit suite.
## All four at once (-j3: 15-17 min) overloaded the 2 cores: four CI runs in a row each failed one
## different timing-sensitive test. The unit suite whole and then the host suite in lane 1 left the
## guests' cores to lane 1 alone for its last 7 minutes: 34 min in CI.
test: install
ifeq ($(IS_ROOT),yes)
	integration/images/install-tools.sh
	$(MAKE) -j2 --output-sync=target test-host test-v2
else
	$(MAKE) unit
	@echo "integration suites skipped: they need root (run 'sudo make integration integration-v2')"
endif

test-host: install
	rc=0; $(MAKE) unit-kube || rc=1; $(MAKE) integration || rc=1; exit $$rc

test-v2: install
	rc=0; $(MAKE) integration-v2 || rc=1; $(MAKE) unit-rest || rc=1; exit $$rc

## The two slowest kubectl files (server kills, controllers: a fifth of unit-kube's time) go with
## the rest, after the guests: CI at 9a1d32b had lane 1 at 566 + 999 s and lane 2 at 1078 + 276 s.
UNIT_KUBE_LATE := tests/test_kube_controllers.py tests/test_kube_server_kill.py
UNIT_KUBE := $(filter-out $(UNIT_KUBE_LATE),$(sort $(wildcard tests/test_kube_*.py)))

## unit = unit-kube + unit-rest
unit: install
	$(BIN)/pytest tests $(PYTEST_IT)

unit-kube: install
	$(BIN)/pytest $(UNIT_KUBE) $(PYTEST_IT)

unit-rest: install
	$(BIN)/pytest tests $(addprefix --ignore=,$(UNIT_KUBE)) $(PYTEST_IT)

## The image tests need Debian's runc, crun, skopeo, umoci, docker-registry and busybox-static:
## install-tools.sh installs the missing ones (the UML guest sees the host's / and so the same tools).
integration: install
	integration/images/install-tools.sh
	$(BIN)/pytest integration $(PYTEST_IT)

## The guest has one CPU, so the suite runs in two guests at once (both halves always run to their
## end): the image tests and test_a*.py but the load test in one, the rest in the other.
## test_systemd_uml.py boots a guest of its own and runs on the host (`make integration`);
## conftest's collect_ignore keeps it out of a guest only when pytest collects the directory, so
## the file list leaves it out here. HOST_ONLY: the multi-node control-plane suites (a server and
## two or three agents: Deployments, DaemonSets, Jobs, drains, the scheduler's placement, the
## README's cluster walkthrough) test the controllers and the scheduler through real agents; every
## kernel operation those agents do is tested on both kernels by the agent's own suites, and on one
## virtual CPU the daemons took ~12 of guest B's 22 minutes. They run once, on the host, in
## `make integration`.
HOST_ONLY := integration/test_systemd_uml.py integration/test_cluster_workloads.py integration/test_scheduler_cluster.py \
             integration/test_readme_cluster.py
V2_A := integration/images $(filter-out integration/test_autoscaling_load.py,$(sort $(wildcard integration/test_a*.py)))
V2_B := $(filter-out $(V2_A) $(HOST_ONLY),$(sort $(wildcard integration/test_*.py)))

integration-v2: install
	integration/images/install-tools.sh
	integration/run-in-uml.sh --print-kernel > /dev/null
	$(MAKE) -j2 --output-sync=target integration-v2-a integration-v2-b

integration-v2-a: install
	integration/run-in-uml.sh $(BIN)/pytest $(V2_A) $(PYTEST_IT)

integration-v2-b: install
	integration/run-in-uml.sh $(BIN)/pytest $(V2_B) $(PYTEST_IT)

## The integration suite in a container with a private cgroup namespace (docker run --privileged
## --cgroupns=private on a cgroup v2 host with docker; here: own dockerd and a debootstrap base, as
## root). See README.md, "Integration suite in a container". Not part of `make test`.
integration-container:
	integration/container/run.sh

bench: bench-agent bench-scheduler bench-images bench-storage bench-apiserver bench-autoscaling bench-cluster

## Pod start latency, 100-pod burst, idle CPU/RSS with 100 pods, the CPU cost of 1 s resource
## sampling over 100 pods (as root; prints figures).
bench-agent: install
	$(BIN)/python bench/spawn_bench.py
	$(BIN)/python bench/pod_start_bench.py
	$(BIN)/python bench/idle_bench.py
	$(BIN)/python bench/stats_bench.py

bench-scheduler: install
	$(BIN)/python bench/scheduler_bench.py

## HPA reaction on simulated load traces (upstream's pipeline against the fast one) and the sample window at 10,000 pods.
bench-autoscaling: install
	$(BIN)/python bench/hpa_bench.py
	$(BIN)/python bench/metrics_bench.py

## Pull of a ~50 MB image from a local registry, the agent against `skopeo copy` (as root).
bench-images: install
	integration/images/install-tools.sh
	$(BIN)/python bench/image_bench.py
	$(BIN)/python bench/pod_start_bench.py --image --mem-limit 64Mi

## The control plane's Store: durable txns/s, loop cost of the writes, watch latency, RSS (prints figures).
bench-storage: install
	$(BIN)/python bench/storage_bench.py

## The Kubernetes API through a real server: creates/s, LIST of 10,000 pods, watch delivery, RSS (prints figures).
bench-apiserver: install
	$(BIN)/python bench/apiserver_bench.py

## The controllers and scheduler against 100 hollow nodes: a 1000-replica Deployment created and rolled,
## 50 Deployments at once, idle CPU with 10,000 pods (a real server; prints figures).
bench-cluster: install
	$(BIN)/python bench/hollow_cluster_bench.py

PREFIX  ?= /usr/local
UNITDIR ?= /etc/systemd/system
## Run the agent under systemd from this checkout's venv (as root).
install-systemd: install
	install -d -m 0755 /etc/nodeagent
	[ -e /etc/nodeagent/config.yaml ] || install -m 0644 config/nodeagent.yaml /etc/nodeagent/config.yaml
	$(BIN)/nodeagent check-config --config /etc/nodeagent/config.yaml > /dev/null
	ln -sfn $(CURDIR)/$(BIN)/nodeagent $(PREFIX)/bin/nodeagent
	sed 's#/usr/local/bin/nodeagent#$(PREFIX)/bin/nodeagent#' systemd/nodeagent.service > $(UNITDIR)/nodeagent.service
	systemctl daemon-reload
	@echo "now: systemctl enable --now nodeagent"

clean:
	rm -rf $(VENV) $(LINT_VENV) .uml-pytest-tmp .uml-work .container-work build *.egg-info
