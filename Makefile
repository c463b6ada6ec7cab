# The two commands of the README:
#   make run   install what is missing, bring the local stack up, run the main job
#   make test  install what is missing, run the whole test suite on the real stack
# Everything else here is what those two are made of.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
JVM_CACHE := .cache/jvm
JVM_POMS  := $(wildcard jvm/pom.xml jvm/*/pom.xml) $(shell find jvm -name '*.java' -not -path '*/target/*')

.PHONY: install system python jvm jvm-archive helm kube cluster run tour test long faults scale suites extended soak lint docs unit bench bench-quick stack-up stack-down stack-status clean-stack lock wheelhouse image package

install: system python jvm jvm-archive helm

system:
	@scripts/install-system-packages.sh

python: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@# the build backend's notices (an editable install's caveats) are not the newcomer's concern
	PYTHONWARNINGS=ignore $(BIN)/pip install -q -e '.[all,test]'
	@touch $@

jvm: $(JVM_CACHE)/.resolved
$(JVM_CACHE)/.resolved: $(JVM_POMS)
	rm -rf $(JVM_CACHE)/*/  # a version changed in a pom leaves no stale jar on a classpath
	mvn -q -f jvm/pom.xml package
	@touch $@

# A class-data archive of the Spark driver's JVM (streams/jvm_archive.py): every Spark start
# maps the classes a training run saved instead of loading them (a session 10 -> 6 s here).
# Built once per java and class path (~1 minute); a no-op when it is there.
jvm-archive: python jvm
	@$(BIN)/python -m streams.jvm_archive

# helm, built from its Go module through the Go module proxy (no helm binary is packaged
# here; the Go toolchain too comes from the proxy when none is on PATH): what the chart's
# tests render and lint with (tests/deploy).
HELM_VERSION := v3.22.0
HELM := .cache/helm-$(HELM_VERSION)/helm
helm: $(HELM)
$(HELM):
	scripts/install-helm.sh $(HELM_VERSION) $(dir $(HELM))

# kube-apiserver, built from the Kubernetes Go module through the Go module proxy into a cache
# outside the checkout (a clean clone finds it there): the API server the chart is installed on
# for real (`mcq stack up --with kubernetes`, tests/cluster). Cold, about 4-6 minutes on two
# cores; only `make cluster` needs it. The version is mcq/config/stack.py's KUBE_VERSION.
KUBE_VERSION := v1.34.4
KUBE_APISERVER := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/mcq/kube-$(KUBE_VERSION)/kube-apiserver
kube: $(KUBE_APISERVER)
$(KUBE_APISERVER): | helm
	scripts/install-kube-apiserver.sh $(KUBE_VERSION) $(dir $(KUBE_APISERVER))

# The main job: the campus world captured end to end, the smoke pipeline, then the demo:
# normaliser and listeners running, a scripted burst of changes, targets checked against the source.
run: install
	$(BIN)/mcq stack up
	$(BIN)/mcq world load --people 3000
	$(BIN)/mcq registry apply examples/campus.yaml
	$(BIN)/mcq topics apply
	$(BIN)/mcq schemas apply
	$(BIN)/mcq connect apply
	$(BIN)/mcq connect status
	$(BIN)/mcq smoke
	$(BIN)/mcq console --local-admin --background
	$(BIN)/mcq demo

lint: python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	@$(MAKE) --no-print-directory docs

# The documentation site (mkdocs.yml) into out/site/, strictly: a broken link or anchor, a page
# left out of the navigation or a reference the code cannot generate fails the build.
docs: python
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --quiet

unit: python helm
	$(BIN)/pytest -m 'not integration'

test: install lint
	$(BIN)/pytest -m 'not long and not faults and not scale and not soak and not package and not cluster and not tour' --durations=20

# What a user installs, run outside the checkout against the local stack (tests/package):
# the wheel in a fresh virtualenv (base install, then [spark]), and both images under podman,
# started through testcontainers. Minutes (Spark's wheel installed, two images built), so a
# suite of its own; CI runs it after `make test` (.ci/run).
package: install image
	$(BIN)/pytest -m package --durations=10

# The lock files the image installs (exact versions and hashes): the base install (a listener)
# and every extra; run after changing pyproject.toml's dependencies.
LOCK := $(BIN)/uv pip compile pyproject.toml -q --generate-hashes --python-version 3.11 \
	--python-platform x86_64-manylinux_2_36 --custom-compile-command 'make lock'
lock: python
	$(LOCK) -o requirements/listener.lock
	$(LOCK) --extra all -o requirements/all.lock

# The wheelhouse the Dockerfile installs from: mcq's wheel, and every locked dependency as a
# wheel (hashes checked as they are downloaded; an sdist such as pyspark's built here), and
# the lock files' exact versions as the pins the image installs.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
wheelhouse: python
	@# setuptools' build/ would carry modules deleted since the last build into the wheel
	rm -rf out/wheelhouse build && mkdir -p out/wheelhouse
	$(BIN)/pip wheel -q --no-deps -w out/wheelhouse .
	rm -rf build
	$(BIN)/pip wheel -q -r requirements/all.lock -w out/wheelhouse
	$(BIN)/pip wheel -q -r requirements/listener.lock -w out/wheelhouse
	@# the exact versions, without the hashes: pip checked those of the downloads above, and an
	@# sdist's wheel built here (pyspark's) has a hash of its own
	for lock in requirements/*.lock; do \
	  sed -n 's/^\([A-Za-z0-9_.-]*==[^ ]*\).*/\1/p' $$lock > out/wheelhouse/$$(basename $$lock .lock).pins; done

# The images, daemonless (buildah) from Debian's packages: localhost/mcq-listener:VERSION (no
# JRE, no Spark) and localhost/mcq:VERSION (scripts/build-image.sh).
image: wheelhouse jvm
	scripts/build-image.sh $(VERSION)

# Beyond one machine (tests/cluster): the normaliser and the batch jobs on a standalone Spark
# cluster (`mcq stack up --with spark`), the chart installed for real on a Kubernetes API server
# (`--with kubernetes`). Minutes, so a suite of its own; CI runs it after `make package`.
cluster: install kube
	$(BIN)/pytest -m cluster --durations=10

# The README's five-minute tour, run as a newcomer runs it right after `make run`, on the
# stack and campus it leaves (tests/integration/test_readme_tour.py); .ci/run runs it then.
tour: install
	$(BIN)/pytest -m tour --durations=5

# The long scenarios: a stack of its own (`--secure`), a normaliser followed through its
# catch-up and hand-over or a registry change. Minutes each on two cores, so a session of
# their own to keep `make test` under 25 minutes; CI runs it after `make test` (.ci/run).
long: install
	$(BIN)/pytest -m long --durations=10

# The fault scenarios (issue 16): components killed and restarted under load, lost slots,
# poison input. Minutes each (a broker's recovery after SIGKILL alone takes one), so a
# session of their own; CI runs it after `make test` (.ci/run).
faults: install
	$(BIN)/pytest -m faults --durations=10

# The scale test: a world of 10,000 people through the whole pipeline to LDAP and the
# import table (about 5 minutes alone); CI runs it after `make faults` (.ci/run).
scale: install
	$(BIN)/pytest -m scale --durations=5

# What CI runs after `make test` (.ci/run): the five suites above in one pytest session, so
# what they share happens once (the session's start, and the module setups of test modules
# whose scenarios sit in two suites: a normaliser's run over a world in test_normalize.py and
# test_normalize_delivery.py). The services a suite starts for itself (the Spark cluster, the
# Kubernetes API server) stop after the module that uses them. The scenarios marked
# `extended` are left out for time (two cores); `make extended` runs them.
suites: install image kube
	$(BIN)/pytest -m '(package or cluster or long or faults or scale) and not extended' --durations=40

extended: install
	$(BIN)/pytest -m extended --durations=20

# The soak (issue 16; never in CI): the pipeline under load for MINUTES while a random
# component is SIGKILLed and started again every 1-3 minutes; prints the summary
# RELIABILITY.md records.
MINUTES ?= 30
soak: install
	MCQ_SOAK_MINUTES=$(MINUTES) $(BIN)/pytest -m soak -s tests/soak

# Benchmarks (never part of `make test`): every measurement of BENCHMARKS.md in one run,
# its tables rewritten there; bench-quick: reduced sizes (4.0 minutes here), printed only.
bench: install
	$(BIN)/mcq stack up
	$(BIN)/python -m bench.run

bench-quick: install
	$(BIN)/mcq stack up
	$(BIN)/python -m bench.run --quick

stack-up: install
	$(BIN)/mcq stack up
stack-down:
	$(BIN)/mcq stack down
stack-status:
	$(BIN)/mcq stack status

# Forget the stack's state (databases, topics, directory); the next `up` starts fresh.
clean-stack: stack-down
	rm -rf .mcq
