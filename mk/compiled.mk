# compiled.mk: the endpoint proxy's hot path compiled by mypyc (included by the Makefile).
#
#   make compiled   build .build/compiled (scripts/compile_hot_path.py) unless it matches the sources
#
# Built beside the tree, never into it; berth/compiled.py loads it only while every source of berth/ and gateway/
# is what it was built from, so an edit runs interpreted until this is run again (`make test` and `make demo` do).
# ~50 s of CPU from nothing.

.PHONY: compiled

COMPILED := .build/compiled/manifest.json
HOT_PATH_SOURCES := $(shell find berth gateway -name '*.py' -not -path '*/__pycache__/*')

compiled: $(COMPILED)

$(COMPILED): $(STAMP) scripts/compile_hot_path.py $(HOT_PATH_SOURCES)
	$(BIN)/python scripts/compile_hot_path.py
