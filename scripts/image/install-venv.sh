#!/bin/sh
# Inside an image build (Dockerfile): the virtualenv /opt/venv with mcq and exactly the pins
# of /wheels/$1.pins (listener: the base install; all: every extra), from the wheelhouse
# alone (no index), checked, then without pip and setuptools (nothing installs at run time).
set -eu
pins=/wheels/${1:?usage: install-venv.sh listener|all}.pins
python3 -m venv /opt/venv
/opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels --no-deps -r "$pins"
/opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels --no-deps meta-change-queue
/opt/venv/bin/pip check
/opt/venv/bin/mcq --version
/opt/venv/bin/python -m pip uninstall -q -y pip setuptools
