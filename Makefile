# RFT Studio: `make demo` sets up and starts everything; `make test` runs the whole test suite.
# Both are idempotent: a second run reuses .venv (a stamp records what was installed), the
# database, the demo login and the demo model/data.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(CURDIR)/$(VENV)/bin
REQ_HASH := $(shell cat requirements.txt pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)
STAMP := $(VENV)/.rft-installed-$(REQ_HASH)
RFT_WEB_PORT ?= 8000
export RFT_WEB_PORT

.PHONY: demo test setup venv migrate demo-user demo-assets static lint clean-var help

help:
	@echo "make demo   set up (venv, database, demo login, demo model+data) and start the stack on http://127.0.0.1:$(RFT_WEB_PORT)/"
	@echo "           (under supervisord: a process that dies is restarted with back-off; logs in var/log/<process>.log,"
	@echo "           one line per restart in var/log/restarts.log; \`.venv/bin/supervisorctl -c var/supervisord.conf status|restart web\`)"
	@echo "make test   the same setup without servers, then the whole pytest suite (SQLite, then PostgreSQL when it answers)"

venv: $(STAMP)

$(STAMP):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "make: Python 3.11+ is required ($(PYTHON) is $$($(PYTHON) -V 2>&1)); run make PYTHON=python3.11"; exit 1; }
	@test -x $(PY) || { echo "== creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "== installing dependencies into $(VENV) (torch CPU build first, so nothing pulls a CUDA build)"
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@rm -f $(VENV)/.rft-installed-* && touch $@

migrate: venv
	@$(PY) scripts/stack.py check-db
	@$(PY) manage.py migrate --noinput -v 0 && echo "== database migrated"

demo-user: migrate
	@$(PY) manage.py ensure_demo_user
	@$(PY) manage.py ensure_demo_experiment

demo-assets: venv
	@$(BIN)/trinity init-demo || { echo "make: \`trinity init-demo\` failed (see above); the demo model and data are needed"; exit 1; }

static: venv
	@$(PY) scripts/stack.py vendor-static

setup: venv migrate demo-user demo-assets static

demo: setup
	@$(PY) scripts/stack.py prepare
	@echo "== starting the Procfile's processes under supervisord — open http://127.0.0.1:$(RFT_WEB_PORT)/ (login in var/demo_login.txt)"
	@echo "   logs: var/log/<process>.log, restarts: var/log/restarts.log; \`$(BIN)/supervisorctl -c var/supervisord.conf status\`; Ctrl-C stops all"
	@PATH="$(BIN):$$PATH" $(PY) scripts/stack.py supervise

# The two passes run one after the other, each in one pytest process by default. TEST_WORKERS=N
# spreads each pass over N pytest-xdist processes (a test file to a process, so its module
# fixtures are shared): most tests wait on a server, a subprocess or Ray. On a 2-core machine N=4
# ran the SQLite pass's first 95% in ~15 minutes, but the load it makes (15-25) times out some
# browser and Ray tests, so it is not yet the default (issue 31).
# Reports: var/test-reports/{sqlite,postgres}.xml (JUnit) and the 50 slowest tests of each pass.
TEST_WORKERS ?= 0
PG_TEST_WORKERS ?= $(TEST_WORKERS)
TEST_REPORTS := var/test-reports

test: setup
	@mkdir -p $(TEST_REPORTS); \
	echo "== pass 1: whole suite, database: SQLite (temporary test databases)"; \
	env -u DATABASE_URL PATH="$(BIN):$$PATH" $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile \
	  --junitxml=$(TEST_REPORTS)/sqlite.xml; rc1=$$?; \
	if [ $$rc1 -eq 5 ]; then echo "make: pytest collected no tests — that is a failure, not a pass"; fi; \
	pg=$$($(PY) scripts/stack.py postgres-url); rc2=0; \
	if [ -n "$$pg" ]; then \
	  echo "== pass 2: webapp + workers tests that use a database, database: PostgreSQL at $$pg"; \
	  DATABASE_URL="$$pg" PATH="$(BIN):$$PATH" $(PY) -m pytest tests/webapp tests/workers -m "not no_test_database" \
	    -n $(PG_TEST_WORKERS) --dist loadfile --junitxml=$(TEST_REPORTS)/postgres.xml; rc2=$$?; \
	  if [ $$rc2 -eq 5 ]; then echo "make: pytest collected no tests on PostgreSQL"; fi; \
	else \
	  echo "== pass 2 (PostgreSQL) NOT run: no PostgreSQL answers at $${RFT_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"; \
	  if [ -n "$${RFT_REQUIRE_POSTGRES:-}" ]; then echo "make: RFT_REQUIRE_POSTGRES is set (.ci/run): the PostgreSQL pass is required"; rc2=1; fi; \
	fi; \
	echo "== make test: SQLite pass exit $$rc1, PostgreSQL pass exit $$rc2 $$([ -n "$$pg" ] || echo '(not run)')"; \
	[ $$rc1 -eq 0 ] && [ $$rc2 -eq 0 ]

lint: venv
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean-var:
	rm -rf var/
