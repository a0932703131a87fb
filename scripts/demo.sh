#!/usr/bin/env bash
# The main job on the built-in default data: packs Fashion-MNIST (Debian's
# dataset-fashion-mnist package) into a volume, inspects it, reads a sample
# back, verifies every checksum, then trains a small CNN for one epoch fed by
# dlfs — and the same epoch fed by torchvision's ImageFolder over PNG files,
# to compare the input pipelines.
#   scripts/demo.sh [WORKDIR]     (default: ./out)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)" --target dlfs_cli _dlfs

work=${1:-out}
mkdir -p "$work"
vol=$work/fashion-mnist.dlfs
src=/usr/share/datasets/fashion-mnist
classes="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"

set -x
build/dlfs pack "$src" -o "$vol" --force --class-names "$classes"
build/dlfs info "$vol"
build/dlfs ls "$vol"
build/dlfs ls "$vol" test --json > "$work/test-listing.jsonl"
head -n 3 "$work/test-listing.jsonl"
# The sample's raw 28x28 pixels, drawn in ASCII.
build/dlfs cat "$vol" train/00042 | od -An -tu1 -w28 -v |
  awk '{ s = ""; for (i = 1; i <= NF; i++) s = s substr(" .:-=+*#%@", int($i / 25.6) + 1, 1); print s }'

build/dlfs verify "$vol"

# Train for one epoch (CPU) fed by dlfs, then by ImageFolder over PNGs.
PYTHONPATH=build/python /usr/bin/python3 examples/train_fashion_mnist.py --volume "$vol"
