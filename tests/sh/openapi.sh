#!/usr/bin/env bash
# The OpenAPI document the worker serves matches what it serves: real responses of a running
# worker (models, health, live, a decision with states and meta, item errors, request errors)
# are validated against the document's own schemas with the `jsonschema` package, and the
# requests we send validate against DecisionRequest. Skips, saying so, where no Python with
# jsonschema and PyYAML is found (scripts/setup.sh installs Debian's python3-jsonschema).
set -u
. "$(dirname "$0")/lib/common.sh"
BIN=${VSR_BIN:?}
PY=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import jsonschema, yaml' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "SKIP: no python3 with jsonschema and yaml (install python3-jsonschema python3-yaml)"; exit 77; }
vsr_tmpdir
export HF_HUB_CACHE=$T/store
"$BIN" fixture --install-builtin vllm-sr-c/d3-tiny >/dev/null || exit 1
PORT=$(vsr_free_port)
# a worker that did not come up (or died) fails here with its log, not later as a refused connection
vsr_start_worker vllm-sr-c/d3-tiny --device cpu --port "$PORT" --log-level warn \
  || { echo "FAIL the worker on port $PORT did not answer /health 200 within a minute"; exit 1; }
"$PY" - "$PORT" <<'PYEOF'
import json, sys, urllib.request, urllib.error
import jsonschema, yaml
port = sys.argv[1]
base = f"http://127.0.0.1:{port}"
def get(path, body=None, method=None):
    req = urllib.request.Request(base + path, data=body.encode() if body is not None else None, method=method)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
status, doc = get("/openapi.yaml")
spec = yaml.safe_load(doc)
comps = spec["components"]["schemas"]
def conv(s):
    """OpenAPI 3.0 schema -> JSON Schema (nullable, refs into $defs)."""
    if isinstance(s, list):
        return [conv(x) for x in s]
    if not isinstance(s, dict):
        return s
    s = {k: conv(v) for k, v in s.items()}
    if "$ref" in s:
        s["$ref"] = s["$ref"].replace("#/components/schemas/", "#/$defs/")
    if s.pop("nullable", False) and "type" in s:
        s["type"] = [s["type"], "null"]
    if s.get("exclusiveMinimum") is True:
        s.pop("exclusiveMinimum"); s["exclusiveMinimum"] = s.pop("minimum", 0)
    return s
defs = {k: conv(v) for k, v in comps.items()}
def schema_of(path, method, code):
    op = spec["paths"][path][method]
    r = op["responses"][str(code)]
    if "$ref" in r:
        r = spec["components"]["responses"][r["$ref"].split("/")[-1]]
    s = next(iter(r["content"].values()))["schema"]
    return dict(conv(s), **{"$defs": defs})
fails = 0
def check(name, path, method, code, body, want_code):
    global fails
    if code != want_code:
        print(f"FAIL {name}: HTTP {code}, want {want_code}: {body[:200]}"); fails += 1; return
    try:
        jsonschema.validate(json.loads(body), schema_of(path, method, code))
        print(f"ok   {name} ({code}) matches the OpenAPI schema")
    except jsonschema.ValidationError as e:
        print(f"FAIL {name}: {e.message} at {list(e.absolute_path)}"); fails += 1
golden = {"state": "Write a Python function that merges two sorted lists and explain its running time.",
          "questions": {"domain": {"type": "choice", "instructions": "Which domain?", "criteria": {"code": "Programming", "math": None}},
                        "reasoning": {"type": "noul", "instructions": "Multi-step?"},
                        "difficulty": {"type": "score", "instructions": "How hard?", "levels": ["Trivial", {"x": 1}, "Hard"]},
                        "bad": {"type": "score", "instructions": "x", "criteria": ["a"]}},
          "states": {"other": {"state": {"k": [1, 2]}, "questions": {"q": {"type": "noul", "instructions": "?"}}}},
          "options": {"return_meta": True, "deadline_ms": 10000}}
try:
    jsonschema.validate(golden, dict(defs["DecisionRequest"], **{"$defs": defs})); print("ok   the request validates against DecisionRequest")
except jsonschema.ValidationError as e:
    print(f"FAIL request: {e.message}"); fails += 1
bad = dict(golden, colour=1)
try:
    jsonschema.validate(bad, dict(defs["DecisionRequest"], **{"$defs": defs})); print("FAIL unknown field accepted by the schema"); fails += 1
except jsonschema.ValidationError:
    print("ok   the schema refuses an unknown field, as the worker does")
for name, path, method, body, want in [
        ("models", "/v1/models", "get", None, 200), ("health", "/health", "get", None, 200),
        ("live", "/health/live", "get", None, 200), ("decision", "/v1/decisions", "post", json.dumps(golden), 200),
        ("alias", "/v1/systemone", "post", json.dumps(golden), 200),
        ("bad json", "/v1/decisions", "post", "{", 400), ("unknown model", "/v1/decisions", "post", json.dumps(dict(golden, model="x/y")), 404),
        ("classify", "/v1/classify", "post", "{}", 422)]:
    code, out = get(path, body, method.upper())
    check(name, path, method, code, out, want)
sys.exit(1 if fails else 0)
PYEOF
rc=$?
vsr_stop_worker
exit $rc
