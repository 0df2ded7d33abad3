# make demo   runs a real deployment on the embedded engine and shows its result
# make test   runs every test (linked with mold and without incremental data: a clean clone
#             builds everything once, and links about ninety test binaries)
# make bench  prints the benchmark figures
# make local-aws       starts the AWS form locally (emulator, stack, functions, poller) on 127.0.0.1
# make local-aws-down  stops it
# make lambdas   builds every function for AWS Lambda (provided.al2023): target/lambda/NAME/bootstrap.zip
.PHONY: setup build demo test bench clean local-aws local-aws-down lambdas

setup:
	@scripts/setup.sh

build: setup
	cargo build --release -p overture

demo: build
	@scripts/demo.sh

test: setup
	scripts/check-pure.sh
	scripts/check-stack.sh
	scripts/check-kinds.py
	scripts/check-rooms.py
	scripts/check-book.sh
	CARGO_INCREMENTAL=0 RUSTFLAGS="$${RUSTFLAGS:-} -C link-arg=-fuse-ld=mold" cargo test --workspace --no-fail-fast

bench: setup
	cargo build --release -p overture -p overture-bench
	target/release/overture-bench

local-aws: setup
	@scripts/local-aws.sh up

local-aws-down:
	@scripts/local-aws.sh down

# ARCH=arm64 for Graviton (the stack's default Architecture is arm64).
# One build per Lambda: built together, cargo would unify their features and every function
# would carry the others' code (docs/decisions/0006).
lambdas: setup
	$(if $(filter arm64,$(ARCH)),rustup target add aarch64-unknown-linux-gnu,)
	for function in submit orchestrator runner projector api triggers; do \
		cargo lambda build --release $(if $(filter arm64,$(ARCH)),--arm64,) --output-format zip \
			-p overture-$$function-lambda || exit 1; \
	done

clean:
	cargo clean
