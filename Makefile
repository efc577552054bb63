PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every optional extra the tests use; constraints.txt pins the versions CI tested.
EXTRAS := dev,postgres,claude-agent-sdk,pydantic-ai,langchain,openai-agents,mcp,opentelemetry,ui

.PHONY: run test lint typecheck pytest bench exports clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/onlooker run examples/research_agent.py --answer '{"approve": true}'

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench tools
	$(BIN)/ruff format --check src tests examples bench tools

typecheck: $(STAMP)
	$(BIN)/mypy src tests examples bench tools

pytest: $(STAMP)
	$(BIN)/pytest -q

# After editing a lazily loading package's _LAZY table: rewrite its generated views.
exports: $(STAMP)
	$(BIN)/python tools/public_api.py

bench: $(STAMP)
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) .onlooker
