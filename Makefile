# Wraps CMake + Ninja. `make` builds the product into bin/; `make test` runs the whole suite
# (format check, a -Werror build under ASan+UBSan, every CTest test including fuzz replays).
BUILD ?= build
TEST_BUILD ?= build-test
JOBS ?= $(shell nproc)
SOURCES = $(shell git ls-files '*.c' '*.h' 2>/dev/null)

.PHONY: all test check-format format fuzz clean

all:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD)
	mkdir -p bin
	cp $(BUILD)/bin/sandboxd $(BUILD)/bin/sandbox-cli $(BUILD)/bin/sandbox-guestd bin/

test: check-format
	cmake -S . -B $(TEST_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSANITIZE=ON -DWERROR=ON >/dev/null
	cmake --build $(TEST_BUILD)
	ctest --test-dir $(TEST_BUILD) --output-on-failure -j $(JOBS)

check-format:
	@out=$$(clang-format --dry-run $(SOURCES) 2>&1); \
	if [ -n "$$out" ]; then echo "$$out" | head -40; \
		echo "clang-format: files above need 'make format'"; exit 1; fi; \
	echo "clang-format: clean"

format:
	clang-format -i $(SOURCES)

# libFuzzer builds of the fuzz targets (clang); run one with e.g.
#   build-fuzz/bin/fuzz-http fuzz/corpus/http
fuzz:
	CC=clang-14 cmake -S . -B build-fuzz -G Ninja -DFUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build build-fuzz

clean:
	rm -rf $(BUILD) $(TEST_BUILD) build-fuzz bin
