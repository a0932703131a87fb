#!/usr/bin/env bash
# The main job on the built-in default data: writes Fashion-MNIST (Debian's
# dataset-fashion-mnist package) as PNG files, packs them into volumes,
# inspects one, decodes a sample with the C++ pipeline, verifies every
# checksum, then trains a small CNN for one epoch fed by dlfs' ImageLoader —
# from the PNG volume and from volumes prepared at pack time (raw pixels,
# JPEG q90), comparing their accuracy — and the same epoch fed by
# torchvision's ImageFolder over the same PNGs, to compare the input
# pipelines.
#   scripts/demo.sh [WORKDIR]     (default: ./out)
if [[ ${1-} == -h || ${1-} == --help ]]; then  # the comment above, and nothing else
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)" --target dlfs_cli _dlfs

work=${1:-out}
mkdir -p "$work"
src=/usr/share/datasets/fashion-mnist
png=$work/fashion-mnist-png
train=$work/fashion-mnist-train.dlfs
test=$work/fashion-mnist-test.dlfs
classes="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"

set -x
# 70,000 PNG files in an ImageFolder tree: <split>/<label>-<class>/<index>.png (once).
[[ -e $png ]] ||
  /usr/bin/python3 bench/data/idx_to_files.py --png --class-names "$classes" "$src" "$png"
build/dlfs pack "$png/train" -o "$train" --force
build/dlfs pack "$png/test" -o "$test" --force
# The same images prepared at pack time: decoded gray pixels (read without decoding), and
# JPEGs at quality 90; info shows what was done.
for split in train test; do
  build/dlfs pack "$png/$split" -o "$work/fashion-mnist-$split-raw.dlfs" --force -q \
    --image-format raw --image-color gray
  build/dlfs pack "$png/$split" -o "$work/fashion-mnist-$split-jpeg90.dlfs" --force -q \
    --image-format jpeg --jpeg-quality 90 --image-color gray
done
build/dlfs info "$work/fashion-mnist-train-raw.dlfs"
build/dlfs info "$train"
build/dlfs ls "$train"
build/dlfs ls "$train" 0-T-shirt-top --json > "$work/listing.jsonl"
head -n 3 "$work/listing.jsonl"
# Sample 42 as the C++ pipeline decodes it, drawn in ASCII from its pixels ...
build/dlfs cat "$train" --index 42 --decode | od -An -tu1 -w28 -v |
  awk '{ s = ""; for (i = 1; i <= NF; i++) s = s substr(" .:-=+*#%@", int($i / 25.6) + 1, 1); print s }'
# ... and as a training epoch sees it (RandomResizedCrop + flip), as a PNG to look at.
build/dlfs cat "$train" --index 42 --decode --size 28 --crop random-resized --flip \
  -o "$work/sample-42-augmented.png"
build/dlfs verify "$train"
build/dlfs bench "$train" --decode --size 28 --color gray --dtype float32 --layout NCHW

# Train for one epoch (CPU) fed by dlfs' ImageLoader, from the prepared volumes (the same
# accuracy within 0.5 points is expected), then by ImageFolder over the PNGs.
PYTHONPATH=build/python /usr/bin/python3 examples/train_fashion_mnist.py \
  --train "$train" --test "$test" --png-dir "$png" \
  --prepared "raw pixels=$work/fashion-mnist-train-raw.dlfs,$work/fashion-mnist-test-raw.dlfs" \
  --prepared "JPEG q90=$work/fashion-mnist-train-jpeg90.dlfs,$work/fashion-mnist-test-jpeg90.dlfs"
