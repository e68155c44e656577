#!/bin/bash
# GET /v1/runs (docs/API.md): newest first, {"object":"list","data":[...],"has_more":...}, cursor
# pagination with limit and after that visits every run exactly once, and the status filter.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 90
have_image || skip "no sandbox image (make image)"
start_api_server

# Seven runs that complete, two that are cancelled while blocked, created in order.
created=()
for i in $(seq 7); do created+=("$(new_run "$QUICK_PROMPT" 20000)"); done
for i in 1 2; do
    id=$(new_run "$SLOW_PROMPT" 20000)
    created+=("$id")
done
for id in "${created[@]:0:7}"; do wait_until "run $id" 400 run_status_is "$id" completed; done
for id in "${created[@]:7:2}"; do
    out=$(api POST "/v1/runs/$id/cancel")
    assert_eq "$(body_of "$out" | jq -r .status)" cancelled "cancel $id"
done
newest_first=$(printf '%s\n' "${created[@]}" | tac)

# The whole list at once, newest first.
out=$(api GET '/v1/runs?limit=100')
assert_eq "$(code_of "$out")" 200 "list"
b=$(body_of "$out")
assert_eq "$(jq -r .object <<<"$b")" list "object"
assert_eq "$(jq -r .has_more <<<"$b")" false "has_more"
assert_eq "$(jq -r '.data[].id' <<<"$b")" "$newest_first" "order"
assert_eq "$(jq -r '[.data[].object] | unique | join(",")' <<<"$b")" run "items are run objects"
# Default limit (20) covers these nine.
assert_eq "$(api GET /v1/runs | sed '$d' | jq '.data | length')" 9 "default limit"

# Pages of 2 with the cursor: every run once, in order, has_more false only on the last page.
seen=() after="" pages=0
while :; do
    q="limit=2"
    [ -n "$after" ] && q="$q&after=$after"
    b=$(api GET "/v1/runs?$q" | sed '$d')
    pages=$((pages + 1))
    n=$(jq '.data | length' <<<"$b")
    mapfile -t page < <(jq -r '.data[].id' <<<"$b")
    seen+=("${page[@]}")
    more=$(jq -r .has_more <<<"$b")
    if [ "$more" = false ]; then break; fi
    assert_eq "$n" 2 "a full page before the end"
    after=${page[-1]}
    [ $pages -le 10 ] || fail "pagination does not end"
done
assert_eq "$pages" 5 "pages of 2 for 9 runs"
assert_eq "$(printf '%s\n' "${seen[@]}")" "$newest_first" "paged order"

# The status filter, alone and with the cursor.
b=$(api GET '/v1/runs?status=cancelled' | sed '$d')
assert_eq "$(jq -r '.data[].id' <<<"$b")" "$(printf '%s\n' "${created[@]:7:2}" | tac)" "cancelled runs"
b=$(api GET '/v1/runs?status=completed&limit=3' | sed '$d')
assert_eq "$(jq '.data | length' <<<"$b")" 3 "completed page"
assert_eq "$(jq -r .has_more <<<"$b")" true "completed has more"
assert_eq "$(jq -r '[.data[].status] | unique | join(",")' <<<"$b")" completed "filter"
last=$(jq -r '.data[-1].id' <<<"$b")
b=$(api GET "/v1/runs?status=completed&limit=10&after=$last" | sed '$d')
assert_eq "$(jq '.data | length' <<<"$b")" 4 "the rest of the completed runs"
assert_eq "$(api GET '/v1/runs?status=running' | sed '$d' | jq '.data | length')" 0 "none running"
# The cursor past the oldest: an empty page.
b=$(api GET "/v1/runs?after=${created[0]}" | sed '$d')
assert_eq "$(jq '.data | length' <<<"$b")" 0 "after the oldest"
assert_eq "$(jq -r .has_more <<<"$b")" false "after the oldest: no more"

# The metadata filter (metadata[KEY]=VALUE, repeatable, all must match), and the prompt in each run.
md_run() { # metadata-json -> id
    local out
    out=$(api POST /v1/runs -H 'Content-Type: application/json' -d "$(jq -n --arg p "$QUICK_PROMPT" \
        --argjson m "$1" '{prompt: $p, max_cost_micros: 20000, metadata: $m}')")
    [ "$(code_of "$out")" = 201 ] || fail "create run with metadata: $out"
    body_of "$out" | jq -r .id
}
a=$(md_run '{"team": "red", "job": "build"}')
b=$(md_run '{"team": "red", "job": "test"}')
c=$(md_run '{"team": "blue", "job": "build", "odd key/[x]": "a&b=c"}')
# -g: curl takes the brackets as they are, not as a glob.
ids() { api GET "/v1/runs?$1" -g | sed '$d' | jq -r '.data[].id' | tr '\n' ' '; }
assert_eq "$(ids 'metadata[team]=red')" "$b $a " "one filter"
assert_eq "$(ids 'metadata%5Bteam%5D=red&metadata%5Bjob%5D=build')" "$a " "two filters, encoded"
assert_eq "$(ids 'metadata[job]=build&limit=1')" "$c " "a filtered page"
assert_eq "$(api GET '/v1/runs?metadata[job]=build&limit=1' -g | sed '$d' | jq .has_more)" true \
    "a filtered page has more"
assert_eq "$(ids "metadata[job]=build&after=$c")" "$a " "a filtered page after a cursor"
assert_eq "$(ids 'metadata%5Bodd%20key%2F%5Bx%5D%5D=a%26b%3Dc')" "$c " "an odd key and value"
assert_eq "$(ids 'metadata[team]=Red')" "" "values match exactly"
assert_eq "$(ids 'metadata[nope]=red')" "" "an absent key matches nothing"
assert_eq "$(ids 'metadata[team]=red&status=cancelled')" "" "with the status filter"
for bad in 'metadata[]=x' 'metadata[team=x' "metadata[$(printf 'k%.0s' $(seq 65))]=x" \
    "metadata[team]=$(printf 'v%.0s' $(seq 513))"; do
    out=$(api GET "/v1/runs?$bad" -g)
    assert_eq "$(code_of "$out")" 400 "bad filter ${bad:0:30}"
    assert_eq "$(body_of "$out" | jq -r .error.param)" metadata "bad filter names metadata"
done
assert_eq "$(run_field "$a" .prompt)" "$QUICK_PROMPT" "the run object's prompt"
echo "list: ok"
