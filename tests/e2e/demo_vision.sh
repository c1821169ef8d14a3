# The vision demo (models/demo-vision, made by scripts/train_demo_vision.py): g4tp run --image
# names the dominant colour of each test picture (PNG, JPEG and WebP of different sizes, none seen
# in training) at TP 1 and 2, and the model still answers the text demo's question without one.
. tests/e2e/_lib.sh
M=models/demo-vision
if ! $G4TP run --help 2>&1 | grep -q -- "--image"; then echo "skip: g4tp run has no --image"; exit 77; fi
for tp in 1 2; do
  for f in tests/data/vision/demo/*; do
    colour=$(basename "$f"); colour=${colour%%.*}
    got=$($G4TP run --model $M --tp $tp --image "$f" -p "What colour is this picture?" --temperature 0)
    expect_eq "$got" "The picture is mostly $colour." "tp $tp: $(basename "$f")"
  done
  got=$($G4TP run --model $M --tp $tp -p "What is the capital of France?" --temperature 0)
  expect_eq "$got" "The capital of France is Paris." "tp $tp: still answers without an image"
done
finish
