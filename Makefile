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

# Three pytest processes in two rounds. Round 1, side by side (one Python process of Django
# requests each, one core each): the SQLite pass's "web" lane (the webapp and workers tests that
# use a database) and the PostgreSQL pass (the same tests on PostgreSQL). Round 2, alone on both
# cores: the SQLite pass's "rest" lane (Ray clusters, training runs, browsers, whole stacks),
# whose timings and load-sensitive waits were measured on a machine it has to itself. The lanes
# are tests/conftest.py's RFT_TEST_LANE (together: the whole suite, once). TEST_WORKERS=N spreads
# each process over N pytest-xdist processes (a test file to a process); on 2 cores N=4 times out
# browser and Ray tests, so it is 0 by default.
# Reports: var/test-reports/{sqlite-web,postgres,sqlite-rest}.xml (JUnit), each process's 50
# slowest tests, and round 1's SQLite log in var/test-reports/sqlite-web.log.
TEST_WORKERS ?= 0
PG_TEST_WORKERS ?= $(TEST_WORKERS)
TEST_REPORTS := var/test-reports
PYTEST_PASS = PATH="$(BIN):$$PATH" $(PY) -m pytest --dist loadfile

test: setup
	@mkdir -p $(TEST_REPORTS); rm -f $(TEST_REPORTS)/*.xml $(TEST_REPORTS)/sqlite-web.*; \
	pg=$$($(PY) scripts/stack.py postgres-url); rc2=0; \
	echo "== round 1: SQLite pass, web lane (log: $(TEST_REPORTS)/sqlite-web.log), beside the PostgreSQL pass"; \
	( env -u DATABASE_URL RFT_TEST_LANE=web $(PYTEST_PASS) -n $(TEST_WORKERS) \
	    --junitxml=$(TEST_REPORTS)/sqlite-web.xml > $(TEST_REPORTS)/sqlite-web.log 2>&1; \
	  echo $$? > $(TEST_REPORTS)/sqlite-web.rc ) & web=$$!; \
	if [ -n "$$pg" ]; then \
	  echo "== pass 2: webapp + workers tests that use a database, database: PostgreSQL at $$pg"; \
	  DATABASE_URL="$$pg" $(PYTEST_PASS) tests/webapp tests/workers -m "not no_test_database" \
	    -n $(PG_TEST_WORKERS) --junitxml=$(TEST_REPORTS)/postgres.xml; rc2=$$?; \
	  if [ $$rc2 -eq 5 ]; then echo "make: pytest collected no tests on PostgreSQL"; fi; \
	else \
	  echo "== pass 2 (PostgreSQL) NOT run: no PostgreSQL answers at $${RFT_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"; \
	  if [ -n "$${RFT_REQUIRE_POSTGRES:-}" ]; then echo "make: RFT_REQUIRE_POSTGRES is set (.ci/run): the PostgreSQL pass is required"; rc2=1; fi; \
	fi; \
	wait $$web; rcw=$$(cat $(TEST_REPORTS)/sqlite-web.rc 2>/dev/null || echo 1); \
	echo "== round 1: SQLite pass, web lane (exit $$rcw):"; cat $(TEST_REPORTS)/sqlite-web.log; \
	if [ $$rcw -eq 5 ]; then echo "make: the web lane collected no tests — that is a failure, not a pass"; fi; \
	echo "== round 2: SQLite pass, rest lane (Ray, training runs, browsers, stacks), database: SQLite"; \
	env -u DATABASE_URL RFT_TEST_LANE=rest $(PYTEST_PASS) -n $(TEST_WORKERS) \
	  --junitxml=$(TEST_REPORTS)/sqlite-rest.xml; rcr=$$?; \
	if [ $$rcr -eq 5 ]; then echo "make: the rest lane collected no tests — that is a failure, not a pass"; fi; \
	echo "== make test: SQLite pass exit $$rcw (web lane) and $$rcr (rest lane), PostgreSQL pass exit $$rc2 $$([ -n "$$pg" ] || echo '(not run)')"; \
	[ $$rcw -eq 0 ] && [ $$rcr -eq 0 ] && [ $$rc2 -eq 0 ]

lint: venv
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean-var:
	rm -rf var/
