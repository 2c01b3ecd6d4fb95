#!/usr/bin/env bash
# The README's API session, as one script (tests/e2e/test_api_curl_session.py runs it against a live
# site): list your experiments, launch the demo experiment, poll its run until it is final, fetch
# its reward curve. Needs curl and jq.
#
#   export TOKEN=rft_...            # created on http://127.0.0.1:8000/account/ (shown once)
#   bash webapp/api/curl_session.sh # BASE=http://host:port NAME=<experiment> to change either
set -euo pipefail
BASE=${BASE:-http://127.0.0.1:8000}
NAME=${NAME:-grpo_demo}
POLL_S=${POLL_S:-5}
auth=(-H "Authorization: Bearer $TOKEN")

# 1. your experiments (id, name, the last run's status)
curl -sS --fail-with-body "${auth[@]}" "$BASE/api/v1/experiments/" \
  | jq -c '.results[] | {id, name, last_run: .last_run.status}'

# 2. launch the demo experiment: 201 with the new run (status "queued")
EXP=$(curl -sS --fail-with-body "${auth[@]}" "$BASE/api/v1/experiments/?search=$NAME" \
  | jq --arg name "$NAME" '[.results[] | select(.name == $name)][0].id')
RUN=$(curl -sS --fail-with-body -X POST "${auth[@]}" "$BASE/api/v1/experiments/$EXP/launch/" | jq .id)
echo "launched run $RUN of experiment $EXP"

# 3. poll until it is final: succeeded, failed (see exit_reason, last_error), cancelled or lost
while :; do
  run=$(curl -sS --fail-with-body "${auth[@]}" "$BASE/api/v1/runs/$RUN/")
  echo "$run" | jq -c '{status, stage, step, total_steps, last_eval_accuracy}'
  [ "$(echo "$run" | jq .is_final)" = true ] && break
  sleep "$POLL_S"
done
echo "$run" | jq -c '{status, exit_reason, last_error}'

# 4. its metric names, then the reward curve as [step, value] pairs (pages of <= 5000 points:
#    pass ?after=<next_after> for the next page)
curl -sS --fail-with-body "${auth[@]}" "$BASE/api/v1/runs/$RUN/metrics/" | jq -c .names
curl -sS --fail-with-body "${auth[@]}" \
  "$BASE/api/v1/runs/$RUN/metrics/?name=rollout/reward/mean&limit=5000" \
  | jq -c '[.points[] | [.step, .value]]'
