# Images through the server (issue 25 items 4-6) on tests/data/vision/demo_vision (the demo's text
# weights, a random tower): the official SDKs (tests/node/server_images.mjs: OpenAI chat and
# Responses, Anthropic, Vercel AI SDK), then curl: /generate's images list, the image changes the
# logits and a cached second ask gives the same bits, TP 2 gives TP 1's bits, URL fetching behind
# the allow-list (a local http.server: served, 404, redirect loop, a redirect off the list, too
# big), every bad image a 400 naming where it was (corrupt, truncated, empty, GIF, bad base64, a
# decompression bomb, too many, a typed placeholder, a batch), image tokens past the context, a
# model without a tower, and the image metrics. Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
M=tests/data/vision/demo_vision
IMG=tests/data/vision/images/nonsquare_333x517.png
IMG2=tests/data/vision/images/native_672x960.png
BIG=tests/data/vision/images/square_1000x1000.png   # 97 KB: over the 90 KB limit below
KEY=test-key-$$
H=(-H "Authorization: Bearer $KEY")
Q='What is the capital of France?'
# post, with the body from a file: a request with two images is too long for curl's argv
post() {
  local path=$1; shift; printf '%s' "$1" > "$SRV_TMP/body.json"; shift
  local out; out=$(curl -s --max-time $((60 * SLOW)) -w '\n%{http_code}' -H 'Content-Type: application/json' "$@" --data-binary @"$SRV_TMP/body.json" "$URL$path")
  CODE=${out##*$'\n'}; BODY=${out%$'\n'*}
}
ANSWER='The capital of France is Paris.'

# a local image host: /img.png, /redir (to /img.png), /loop (to itself), /off (to localhost, not
# on the list), /big.png, /slow1 -> /slow2 -> /slow3 -> /img.png (0.9 s a hop), anything else 404
python3 - "$SRV_TMP/fetch.port" "$IMG" "$BIG" <<'EOF' &
import http.server, sys, threading
port_file, img, big = sys.argv[1:4]
data = {'/img.png': open(img, 'rb').read(), '/big.png': open(big, 'rb').read()}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path in data:
            self.send_response(200); self.send_header('Content-Type', 'image/png'); self.end_headers(); self.wfile.write(data[self.path]); return
        if self.path.startswith('/slow'):  # each hop 0.9 s: under the per-hop limit, over the whole one
            __import__('time').sleep(0.9)
        to = {'/redir': '/img.png', '/loop': '/loop', '/off': 'http://localhost:%d/img.png' % self.server.server_port,
              '/slow1': '/slow2', '/slow2': '/slow3', '/slow3': '/img.png'}.get(self.path)
        if to:
            self.send_response(302); self.send_header('Location', to); self.send_header('Content-Length', '0'); self.end_headers(); return
        self.send_response(404); self.send_header('Content-Length', '0'); self.end_headers()
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
open(port_file + '.tmp', 'w').write(str(s.server_port)); __import__('os').rename(port_file + '.tmp', port_file)
s.serve_forever()
EOF
FETCH_PID=$!
trap 'kill $FETCH_PID 2>/dev/null; srv_cleanup' EXIT
for i in $(seq 1 100); do [ -s "$SRV_TMP/fetch.port" ] && break; sleep 0.1; done
FURL=http://127.0.0.1:$(cat "$SRV_TMP/fetch.port")

API_KEY=$KEY srv_start --model $M --allowed-image-domains 127.0.0.1 --max-image-bytes 90000 --max-images 2 --image-fetch-timeout-ms 2500 || { bad "server starts"; finish; exit 1; }

# the question alone, for the SDK test's token count
post /v1/messages/count_tokens "{\"model\":\"demo_vision\",\"messages\":[{\"role\":\"user\",\"content\":\"$Q\"}]}" "${H[@]}"
TEXT_TOKENS=$(pyget "d['input_tokens']")
if command -v node >/dev/null && [ -f tests/node/node_modules/ai/package.json ]; then
  G4TP_MODEL=demo_vision G4TP_IMAGE=$IMG G4TP_TEXT_TOKENS=$TEXT_TOKENS node_tests tests/node/server_images.mjs "SDK image tests (openai, @anthropic-ai/sdk, ai)"
else
  bad "node and the SDK packages are needed (scripts/install-deps.sh; cd tests/node && npm ci)"
fi

B64=$(base64 -w0 "$IMG"); B64_2=$(base64 -w0 "$IMG2")
# the same picture mirrored: as many image tokens, other pixels (Debian's Pillow)
/usr/bin/python3 -c "import sys; from PIL import Image, ImageOps; ImageOps.mirror(Image.open(sys.argv[1])).save(sys.argv[2])" "$IMG" "$SRV_TMP/mirror.png"
B64_M=$(base64 -w0 "$SRV_TMP/mirror.png")
part() { printf '{"type":"image_url","image_url":{"url":"%s"}}' "$1"; }
chat() { # chat IMAGE_PART... : the France question after the given parts, greedy, with top logprobs
  local parts="" p
  for p in "$@"; do parts="$parts$p,"; done
  printf '{"messages":[{"role":"user","content":[%s{"type":"text","text":"%s"}]}],"temperature":0,"max_tokens":8,"logprobs":true,"top_logprobs":5}' "$parts" "$Q"
}
LP="json.dumps([[t['logprob']]+[x['logprob'] for x in t['top_logprobs']] for t in d['choices'][0]['logprobs']['content']])"

# /generate: the images list (base64), placed before the text
post /generate "{\"prompt\":\"$Q\",\"images\":[\"$B64\"],\"temperature\":0}" "${H[@]}"
expect_eq "$CODE $(pyget "d['response']")" "200 $ANSWER" "/generate with images: the answer"
GEN_TOKENS=$(pyget "d['prompt_tokens']")
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64")")" "${H[@]}"
expect_eq "$(pyget "d['usage']['prompt_tokens']")" "$GEN_TOKENS" "chat and /generate count the same prompt tokens for the same image"
A1=$(pyget "$LP"); C1=$(pyget "d['usage']['prompt_tokens_details']['cached_tokens']")
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64")")" "${H[@]}"
A2=$(pyget "$LP"); C2=$(pyget "d['usage']['prompt_tokens_details']['cached_tokens']")
expect_eq "$A2" "$A1" "the same image asked again (from the prefix cache) gives the same logprobs, bit for bit"
[ "$C2" -ge $((GEN_TOKENS - 1)) ] && ok "the second ask reuses the image's KV ($C2 cached tokens)" || bad "cached tokens $C2 of $GEN_TOKENS"
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64_M")")" "${H[@]}"
B1=$(pyget "$LP"); CB=$(pyget "d['usage']['prompt_tokens_details']['cached_tokens']")
expect_eq "$(pyget "d['usage']['prompt_tokens']")" "$GEN_TOKENS" "the mirrored picture has as many image tokens"
[ "$B1" != "$A1" ] && ok "another picture changes the logits" || bad "two pictures gave the same logprobs: the tower's output is not used"
[ "$CB" -lt "$C2" ] && ok "another picture of the same size is not taken from the cache ($CB cached tokens)" || bad "another picture hit the cache: $CB"
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64")" "$(part "data:image/png;base64,$B64_2")")" "${H[@]}"
TWO=$(pyget "d['usage']['prompt_tokens']")
[ "$CODE" = 200 ] && [ "$TWO" -gt "$GEN_TOKENS" ] && ok "two images in one message ($TWO prompt tokens)" || bad "two images: $CODE $BODY"

# URL fetching: allowed host, redirects, limits
post /v1/chat/completions "$(chat "$(part "$FURL/img.png")")" "${H[@]}"
expect_eq "$(pyget "$LP")" "$A1" "an image URL on the allow-list is fetched: the same bits as the data URL"
post /v1/chat/completions "$(chat "$(part "$FURL/redir")")" "${H[@]}"
expect_eq "$CODE" 200 "a redirect to an image on the same host is followed"
post /v1/chat/completions "$(chat "$(part "$FURL/loop")")" "${H[@]}"
expect_error 400 invalid_value "a redirect loop is a 400"
post /v1/chat/completions "$(chat "$(part "$FURL/off")")" "${H[@]}"
expect_error 400 invalid_value "a redirect to a host off the allow-list is a 400"
pyck "'allowed-image-domains' in d['error']['message']" && ok "... saying the host is not allowed" || bad "off-list message: $BODY"
post /v1/chat/completions "$(chat "$(part "http://localhost:${FURL##*:}/img.png")")" "${H[@]}"
expect_error 400 invalid_value "a host off the allow-list is not fetched"
post /v1/chat/completions "$(chat "$(part "$FURL/big.png")")" "${H[@]}"
expect_error 400 invalid_value "an image over --max-image-bytes is refused as it arrives"
post /v1/chat/completions "$(chat "$(part "$FURL/missing.png")")" "${H[@]}"
expect_error 400 invalid_value "a 404 is a 400 naming the URL"
post /v1/chat/completions "$(chat "$(part "$FURL/slow1")")" "${H[@]}"
expect_error 400 invalid_value "--image-fetch-timeout-ms bounds the whole fetch, redirects included (3 hops of 0.9 s against 2.5 s)"
pyck "'timed out' in d['error']['message']" && ok "... saying it timed out" || bad "slow chain: $BODY"
post /v1/chat/completions "$(chat "$(part "$FURL/$(python3 -c "print('a' * 4200)")")")" "${H[@]}"
expect_error 400 invalid_value "a URL of more than 4095 characters is refused, not cut short"

# bad images: each a 400 naming the content part
bad_image() { # bad_image DATA_URL WHAT [MESSAGE_REGEX]
  post /v1/chat/completions "$(chat "$(part "$1")")" "${H[@]}"
  if [ "$CODE" = 400 ] && printf '%s' "$BODY" | python3 -c "import json,re,sys; e=json.load(sys.stdin)['error']
sys.exit(0 if e['param'].startswith('messages[0].content[0]') and re.search(sys.argv[1], e['message']) else 1)" "${3:-.}"; then
    ok "$2: 400 naming the part"
  else bad "$2: $CODE $BODY"; fi
}
bad_image "data:image/png;base64,$(head -c 3000 "$IMG" | base64 -w0)" "a truncated PNG" "PNG"
bad_image "data:image/png;base64,$(printf 'not an image at all' | base64 -w0)" "a corrupt image" "not a PNG, JPEG or WebP"
bad_image "data:image/png;base64," "a zero-size image"
bad_image "data:image/gif;base64,$(printf 'GIF89a\001\000\001\000\000\000\000;' | base64 -w0)" "a GIF" "GIF"
bad_image "data:image/png;base64,iVBO!!!=" "bad base64" "base64"
BOMB=$(python3 -c "
import struct,zlib,base64
def chunk(t,b): return struct.pack('>I',len(b))+t+b+struct.pack('>I',zlib.crc32(t+b)&0xffffffff)
png=b'\x89PNG\r\n\x1a\n'+chunk(b'IHDR',struct.pack('>IIBBBBB',100000,100000,8,2,0,0,0))+chunk(b'IDAT',zlib.compress(b'\0'*1000))+chunk(b'IEND',b'')
print(base64.b64encode(png).decode())")
bad_image "data:image/png;base64,$BOMB" "a decompression bomb (100000 x 100000 declared)" "pixels|large"
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64")" "$(part "data:image/png;base64,$B64")" "$(part "data:image/png;base64,$B64")")" "${H[@]}"
expect_error 400 invalid_value "more images than --max-images is a 400"
post /v1/chat/completions '{"messages":[{"role":"user","content":"<|image|> What is this?"}],"max_tokens":4}' "${H[@]}"
expect_error 400 invalid_value "a placeholder typed into the text is a 400"
post /generate "{\"prompt\":[\"$Q\",\"hi\"],\"images\":[\"$B64\"]}" "${H[@]}"
expect_error 400 invalid_value "images with a batch of prompts is a 400"
post /generate "{\"prompt\":\"$Q\",\"images\":[\"%%%\"]}" "${H[@]}"
expect_error 400 invalid_value "/generate: bad base64 in images is a 400"
post /generate "{\"prompt\":\"$Q\",\"images\":[\"DATA:image/png;base64,$B64\"],\"temperature\":0}" "${H[@]}"
expect_eq "$CODE $(pyget "d['prompt_tokens']")" "200 $GEN_TOKENS" "/generate: a data URL in images (any case) is taken as one"
post /generate "{\"prompt\":\"<|image|>$Q\",\"raw\":true,\"images\":[\"$B64\"]}" "${H[@]}"
expect_error 400 invalid_value "/generate: images with a raw prompt are a 400"
post /v1/chat/completions "{\"messages\":[{\"role\":\"system\",\"content\":[$(part "data:image/png;base64,$B64")]},{\"role\":\"user\",\"content\":\"$Q\"}]}" "${H[@]}"
expect_error 400 unsupported_value "an image in a system message is a 400 (the template shows only a system turn's text)"
pyck "d['error']['param']=='messages[0].content[0]'" && ok "... naming the part" || bad "system image: $BODY"
# a tool_result's text blocks are joined as without images, the images after them
tool_result() { # tool_result WITH_IMAGE: a count_tokens body whose tool_result is [text A, (image,) text B]
  python3 -c "
import json,sys
img=[{'type':'image','source':{'type':'base64','media_type':'image/png','data':sys.argv[2]}}] if sys.argv[1]=='1' else []
print(json.dumps({'model':'demo_vision','messages':[{'role':'user','content':'q'},
  {'role':'assistant','content':[{'type':'tool_use','id':'t1','name':'f','input':{}}]},
  {'role':'user','content':[{'type':'tool_result','tool_use_id':'t1','content':[{'type':'text','text':'A'}]+img+[{'type':'text','text':'B'}]}]}],
  'tools':[{'name':'f','input_schema':{'type':'object'}}]}))" "$1" "$B64"
}
post /v1/messages/count_tokens "$(tool_result 0)" "${H[@]}"
NOIMG=$(pyget "d['input_tokens']")
post /v1/messages/count_tokens "$(tool_result 1)" "${H[@]}"
expect_eq "$CODE $(( $(pyget "d['input_tokens']") - NOIMG ))" "200 $((GEN_TOKENS - TEXT_TOKENS))" "Anthropic tool_result: texts joined the same with an image, which adds just its tokens"
post /v1/messages "{\"model\":\"demo_vision\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"$FURL/img.png\"}},{\"type\":\"text\",\"text\":\"$Q\"}]}]}" "${H[@]}" -H 'anthropic-version: 2023-06-01'
expect_eq "$CODE" 200 "Anthropic: an image block with a URL source on the allow-list"
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64")")" "${H[@]}"
expect_eq "$(pyget "$LP")" "$A1" "after all the refusals the server gives the same bits"

# metrics
[ "$(metric g4tp_images_total)" -ge 8 ] && ok "g4tp_images_total counts the images taken" || bad "g4tp_images_total $(metric g4tp_images_total)"
[ "$(metric 'g4tp_images_refused_total{reason="corrupt"}')" -ge 2 ] && ok "refused images are counted by reason" || bad "refused: $(curl -s "$URL/metrics" | grep images_refused)"
[ "$(metric 'g4tp_images_refused_total{reason="too_many"}')" = 1 ] && ok "... too_many" || bad "too_many: $(metric 'g4tp_images_refused_total{reason="too_many"}')"
[ "$(metric g4tp_images_encoded_total)" -ge 3 ] && ok "g4tp_images_encoded_total counts the tower's runs" || bad "encoded $(metric g4tp_images_encoded_total)"
if command -v promtool >/dev/null; then
  curl -s "$URL/metrics" | awk '/^# (HELP|TYPE) g4tp_image/ || /^g4tp_image/' > "$SRV_TMP/im.txt"
  promtool check metrics < "$SRV_TMP/im.txt" > "$SRV_TMP/prom.err" 2>&1 && ok "promtool: the image metrics are clean" || { bad "promtool"; cat "$SRV_TMP/prom.err"; }
fi
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"

# TP 2: the same bits; a context too short for the image tokens
API_KEY=$KEY srv_start --model $M --tp 2 || { bad "server starts at TP 2"; finish; exit 1; }
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64")")" "${H[@]}"
expect_eq "$(pyget "$LP")" "$A1" "TP 2 gives TP 1's logprobs with an image, bit for bit"
post /v1/chat/completions "$(chat "$(part "$FURL/img.png")")" "${H[@]}"
expect_error 400 invalid_value "image URLs are not fetched without --allowed-image-domains"
srv_stop
API_KEY=$KEY srv_start --model $M --max-ctx 48 || { bad "server starts with a short context"; finish; exit 1; }
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64")")" "${H[@]}"
expect_error 400 '*' "image tokens past the context are a 400"
srv_stop
# a model folder without a vision tower
API_KEY=$KEY srv_start --model models/demo || { bad "the demo model starts"; finish; exit 1; }
post /v1/chat/completions "$(chat "$(part "data:image/png;base64,$B64")")" "${H[@]}"
expect_error 400 '*' "an image for a model without a vision tower is a 400"
pyck "'vision tower' in d['error']['message'] or 'images' in d['error']['message']" && ok "... saying the model takes no images" || bad "message: $BODY"
srv_stop
kill $FETCH_PID 2>/dev/null
finish
