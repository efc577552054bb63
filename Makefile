PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every optional extra the tests use; constraints.txt pins the versions CI tested.
EXTRAS := dev,postgres,claude-agent-sdk,pydantic-ai,langchain,openai-agents,mcp,opentelemetry,ui

.PHONY: run test lint typecheck pytest bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/onlooker run examples/research_agent.py --answer '{"approve": true}'

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench

typecheck: $(STAMP)
	$(BIN)/mypy src tests examples bench

pytest: $(STAMP)
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) .onlooker
