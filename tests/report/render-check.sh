#!/usr/bin/env bash
# Headless-browser check of the HTML report (issue 5 acceptance: "the HTML report renders
# in headless Chromium and a screenshot shows the plots").
#
# 1. builds the sample report with the bench-results example (two results, so the
#    comparison table is included) and checks the sample JSON against
#    docs/bench-result.schema.json with Python's jsonschema when it is installed;
# 2. renders it with Debian's `chromium` (installed by scripts/setup.sh) twice:
#    --dump-dom (the SVG plots and tables must survive parsing) and --screenshot;
# 3. checks the PNG is not blank (decoded with the Python standard library: distinct
#    colours and the share of non-white pixels) and leaves it for a human:
#        ${OUT:-target}/report/sample-report.png       (1280x2400, the checked one)
#        ${OUT:-target}/report/sample-report-full.png  (1280x9000, the whole page)
#
# Usage: tests/report/render-check.sh            (from anywhere; exits non-zero on failure)
# Env:   OUT=dir (default: <repo>/target), CHROMIUM=binary, CARGO_TARGET_DIR as usual.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out_root="${OUT:-$repo/target}"
dir="$out_root/report"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
html="$dir/sample-report.html"
png="$dir/sample-report.png"
dom="$dir/sample-report.dom.html"

fail() { echo "render-check: FAIL: $*" >&2; exit 1; }

chromium="${CHROMIUM:-}"
if [[ -z "$chromium" ]]; then
    for c in chromium chromium-browser google-chrome; do
        if command -v "$c" >/dev/null 2>&1; then chromium="$c"; break; fi
    done
fi
[[ -n "$chromium" ]] || fail "no chromium found (Debian: apt-get install chromium; scripts/setup.sh installs it)"

echo "render-check: building the sample report"
(cd "$repo" && cargo run --quiet -p bench-results --example sample-report --features sample -- "$html") >/dev/null
[[ -s "$html" ]] || fail "sample report $html was not written"

if python3 -c 'import jsonschema' 2>/dev/null; then
    python3 - "$repo/docs/bench-result.schema.json" "$html.json" <<'PY' || fail "sample JSON does not match the schema"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
inst = json.load(open(sys.argv[2]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
errs = list(v.iter_errors(inst))
for e in errs[:10]:
    print("schema:", "/".join(map(str, e.path)), e.message, file=sys.stderr)
bad = dict(inst); bad["driver"] = "vdbench"
if v.is_valid(bad):
    print("schema accepted a mutated result", file=sys.stderr); sys.exit(1)
sys.exit(1 if errs else 0)
PY
    echo "render-check: sample JSON validates against docs/bench-result.schema.json (python jsonschema)"
else
    echo "render-check: python3 jsonschema not installed, schema check left to cargo test"
fi

profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
       --disable-background-networking --disable-component-update --disable-sync
       --disable-dev-shm-usage --hide-scrollbars "--user-data-dir=$profile")

echo "render-check: rendering with $chromium"
rm -f "$png" "$dom"
timeout 60 "$chromium" "${flags[@]}" --dump-dom "file://$html" >"$dom" 2>"$dir/chromium-dom.log" \
    || fail "chromium --dump-dom failed (see $dir/chromium-dom.log)"
timeout 60 "$chromium" "${flags[@]}" "--screenshot=$png" --window-size=1280,2400 "file://$html" \
    >"$dir/chromium-shot.log" 2>&1 || fail "chromium --screenshot failed (see $dir/chromium-shot.log)"
[[ -s "$png" ]] || fail "no screenshot at $png"
# The whole page (all plots) for a human; not checked beyond existing.
timeout 60 "$chromium" "${flags[@]}" "--screenshot=$dir/sample-report-full.png" --window-size=1280,9000 \
    "file://$html" >>"$dir/chromium-shot.log" 2>&1 || echo "render-check: (full-page screenshot failed, ignored)"

python3 - "$dom" "$png" <<'PY' || fail "rendered report does not look right"
import struct, sys, zlib

dom = open(sys.argv[1], encoding="utf-8", errors="replace").read()
svgs, polylines, tables = dom.count("<svg"), dom.count("<polyline"), dom.count("<table")
print(f"render-check: DOM has {svgs} svg plots, {polylines} lines, {tables} tables")
ok = svgs >= 10 and polylines >= 20 and tables >= 3 and "Comparison" in dom
if not ok:
    print("render-check: plots or tables missing from the rendered DOM", file=sys.stderr)

def decode_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, f"unsupported PNG {hdr}"
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f = raw[i]; line = bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line)); prev = line
    return w, h, bpp, rows

w, h, bpp, rows = decode_png(sys.argv[2])
colours, nonwhite, total = set(), 0, 0
for row in rows[::4]:
    for x in range(0, w * bpp, bpp * 4):
        px = row[x:x + 3]
        colours.add(px)
        total += 1
        if px != b"\xff\xff\xff" and px != b"\xfa\xfa\xfa":
            nonwhite += 1
share = nonwhite / max(total, 1)
print(f"render-check: screenshot {w}x{h}, {len(colours)} distinct colours (sampled), {share:.1%} non-background")
if len(colours) <= 10 or share < 0.02:
    print("render-check: screenshot looks blank", file=sys.stderr)
    ok = False
sys.exit(0 if ok else 1)
PY

echo "render-check: OK, screenshots for a human: $png (first 2400 px) and $dir/sample-report-full.png"
