#!/usr/bin/env bash
# The steps of opledger's GitHub Action (action.yml runs `github-action.sh STEP` for each), kept
# in one script so that the same code runs on GitHub and in the tests (tests/github_action.rs
# runs every step of action.yml against a scratch repository). GitHub's own services (the cache,
# artifacts) are `uses:` steps of action.yml; everything decided here reads only the
# environment GitHub sets and the action's inputs (INPUT_*, set by action.yml).
#
#   key      the folder opledger is installed into and the cache key of that folder: the
#            action's version and a hash of its source, so a cached binary is always the one
#            this source builds
#   install  opledger on PATH: from the cache if restored, else the release binary of the
#            action's tag (checked against its SHA-256), else built with cargo
#   valgrind Valgrind for counts mode (specs in `measure: {mode: auto}` count where it is)
#   run      `opledger run`: on the default branch, recorded as that branch's run; on a pull
#            request, gated against the runs at the merge-base with the base branch
#   comment  on a pull request: `opledger compare` against the merge-base, posted as one
#            comment updated in place (written to the step summary where the token may not
#            comment, as on pull requests from forks)
#   finish   exits with the run's exit code (0 pass, 1 gate failed, 2 bad input, 3 backend
#            unavailable), after the archives were uploaded and the comment posted
set -euo pipefail

step="${1:?usage: github-action.sh key|install|valgrind|run|comment|finish}"
src="${GITHUB_ACTION_PATH:?GITHUB_ACTION_PATH is not set: run this as a step of action.yml}"
out="${GITHUB_OUTPUT:-/dev/null}"
command="${INPUT_COMMAND:-run}"
runs="${INPUT_RUNS_DIR:-runs}"
default_branch="${INPUT_DEFAULT_BRANCH:-main}"

case "$command" in
  run | install) ;;
  *)
    echo "::error::opledger action: input 'command' is '$command'; expected 'run' or 'install'"
    exit 2
    ;;
esac

version() { sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$src/Cargo.toml" | head -1; }

# Every file of the action's source: what `cargo install` would build. GitHub unpacks an action
# without its git folder; a clone (as in the tests) hashes its tracked files only, not the build
# outputs and tool folders beside them.
source_hash() {
  (
    cd "$src"
    if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
      git ls-files -z
    else
      find . -type f -not -path './target/*' -not -path './.git/*' -print0
    fi | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
  )
}

# The install folder is the job's own temporary folder, which the runner empties before every
# job: a binary in it was restored by this job from the Actions cache (whose entries a pull
# request's jobs cannot write for the default branch) or installed by this job. The tool cache
# outlives jobs on a self-hosted runner, where a pull request's job could leave a binary for
# the default branch's job to run with its token and store: it is not used.
tools_dir() {
  echo "${OPLEDGER_ACTION_TOOLS:-$(temp_dir)/opledger-tools}/$(version)-$(source_hash)"
}

# The job's temporary folder (the runner empties it before every job), else the system's.
temp_dir() {
  echo "${RUNNER_TEMP:-${TMPDIR:-/tmp}}"
}

is_pull_request() {
  case "${GITHUB_EVENT_NAME:-}" in
    pull_request | pull_request_target) return 0 ;;
    *) return 1 ;;
  esac
}

# The release binary of the action's version, where the action is used at a tag that names it:
# `vX.Y.Z`, the source's own version, or a major (`v0`) or minor (`v0.1`) tag that the version
# is under (the release workflow moves `vX` to each new release), and that release carries one
# for this machine (x86-64 or aarch64 Linux). Checked against its SHA-256 before it is used.
from_release() {
  local dir="$1" version tag ref="${GITHUB_ACTION_REF:-}" arch asset tmp got=1
  version="$(version)"
  tag="v$version"
  case "$ref" in
    "$tag") ;;
    v[0-9]*)
      case "$tag" in "$ref".*) ;; *) return 1 ;; esac ;;
    *) return 1 ;;
  esac
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) arch=x86_64 ;;
    Linux-aarch64 | Linux-arm64) arch=aarch64 ;;
    *) return 1 ;;
  esac
  [ -n "${GITHUB_ACTION_REPOSITORY:-}" ] && command -v gh >/dev/null 2>&1 || return 1
  asset="opledger-$tag-$arch-linux.tar.gz"
  # Downloaded into the job's temporary folder and removed whatever happens: a self-hosted
  # runner's /tmp outlives its jobs.
  tmp="$(mktemp -d "$(temp_dir)/opledger-release.XXXXXX")"
  if gh release download "$tag" --repo "$GITHUB_ACTION_REPOSITORY" --dir "$tmp" \
    --pattern "$asset" --pattern "$asset.sha256" >/dev/null 2>&1; then
    if (cd "$tmp" && sha256sum --quiet -c "$asset.sha256"); then
      mkdir -p "$dir/bin"
      tar -xzf "$tmp/$asset" -C "$dir/bin" opledger && "$dir/bin/opledger" --version >/dev/null \
        && got=0
    else
      echo "::warning::opledger action: $asset does not match its SHA-256; building instead"
    fi
  fi
  rm -rf "$tmp"
  return "$got"
}

case "$step" in
  key)
    dir="$(tools_dir)"
    echo "dir=$dir" >>"$out"
    echo "key=opledger-bin-${RUNNER_OS:-Linux}-${RUNNER_ARCH:-X64}-$(basename "$dir")" >>"$out"
    ;;

  install)
    dir="$(tools_dir)"
    if "$dir/bin/opledger" --version >/dev/null 2>&1; then
      how=cache
    elif from_release "$dir"; then
      how=release
    else
      command -v cargo >/dev/null 2>&1 || {
        echo "::error::opledger action: no release binary for '${GITHUB_ACTION_REF:-?}' and no cargo to build one (add a Rust toolchain to the job)"
        exit 3
      }
      cargo install --locked --quiet --path "$src" --root "$dir"
      how=built
    fi
    echo "$dir/bin" >>"${GITHUB_PATH:-/dev/null}"
    echo "how=$how" >>"$out"
    echo "opledger $("$dir/bin/opledger" --version | awk '{print $2}') from the $how ($dir/bin)"
    ;;

  valgrind)
    [ "$command" = run ] && [ "${INPUT_VALGRIND:-true}" = true ] || exit 0
    command -v valgrind >/dev/null 2>&1 && exit 0
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    if ! { $sudo apt-get install -y --no-install-recommends valgrind >/dev/null 2>&1 \
      || { $sudo apt-get update -qq >/dev/null 2>&1 \
        && $sudo apt-get install -y --no-install-recommends valgrind >/dev/null 2>&1; }; }; then
      echo "::warning::opledger action: Valgrind could not be installed; specs in 'measure: {mode: auto}' gate on time here"
    fi
    ;;

  run)
    [ "$command" = run ] || exit 0
    mkdir -p "$runs"
    read -ra specs <<<"${INPUT_SPECS:-specs/}"
    read -ra extra <<<"${INPUT_ARGS:-}"
    args=(run "${specs[@]}" --runs-dir "$runs" --default-branch "$default_branch")
    [ -z "${GITHUB_STEP_SUMMARY:-}" ] || args+=(--summary-to "$GITHUB_STEP_SUMMARY")
    record=false
    if is_pull_request; then
      base="${GITHUB_BASE_REF:?a pull request event without GITHUB_BASE_REF}"
      # `git merge-base` needs both branches' history: a shallow checkout is deepened, and the
      # base branch fetched where the checkout did not.
      if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
        git fetch -q --no-tags --unshallow origin || true
      fi
      git rev-parse -q --verify "origin/$base" >/dev/null \
        || git fetch -q --no-tags origin "+refs/heads/$base:refs/remotes/origin/$base" || true
      args+=(--against "merge-base:origin/$base" --junit "$runs/junit.xml")
      [ "${INPUT_RERECORD_BASE:-false}" != true ] || args+=(--rerecord-base)
    elif [ "${GITHUB_REF_TYPE:-branch}" = branch ] && [ "${GITHUB_REF_NAME:-}" = "$default_branch" ] \
      && [ "${GITHUB_EVENT_NAME:-push}" != merge_group ]; then
      args+=(--branch "$default_branch")
      record=true
    else
      # Every other event (a merge queue's group, a push to another branch, a manual run) is
      # gated against the default branch at its merge-base too: no event passes ungated.
      if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
        git fetch -q --no-tags --unshallow origin || true
      fi
      git rev-parse -q --verify "origin/$default_branch" >/dev/null \
        || git fetch -q --no-tags origin "+refs/heads/$default_branch:refs/remotes/origin/$default_branch" || true
      args+=(--against "merge-base:origin/$default_branch")
    fi
    log="$(mktemp "$(temp_dir)/opledger-run.XXXXXX")"
    set +e
    opledger "${args[@]}" "${extra[@]}" 2>&1 | tee "$log"
    code=${PIPESTATUS[0]}
    set -e
    report="$(sed -n 's/^report: //p' "$log" | tail -1)"
    rm -f "$log"
    echo "exit-code=$code" >>"$out"
    echo "record=$record" >>"$out"
    if [ -n "$report" ]; then
      echo "report=$report" >>"$out"
      echo "archive=$(dirname "$report")" >>"$out"
    fi
    ;;

  comment)
    [ "$command" = run ] && [ "${INPUT_COMMENT:-true}" = true ] && is_pull_request || exit 0
    archive="${ARCHIVE:-}"
    comment="$runs/comment.md"
    mkdir -p "$runs"
    rm -f "$comment"
    if [ -n "$archive" ]; then
      link=()
      [ -z "${INPUT_LINK_BASE:-}" ] || link=(--link-base "$INPUT_LINK_BASE")
      set +e
      opledger compare --base "merge-base:origin/$GITHUB_BASE_REF" "$archive" --runs-dir "$runs" \
        --markdown "$comment" "${link[@]}" >"$runs/compare.log" 2>&1
      set -e
      cat "$runs/compare.log"
    fi
    if [ ! -f "$comment" ]; then
      # No archived run of the base branch on this device (a first pull request, or a runner of
      # another CPU model than main's): say so, with what opledger said and what decides anyway.
      {
        echo "<!-- opledger-compare -->"
        echo "### opledger: nothing of $GITHUB_BASE_REF to compare with"
        echo
        if [ -n "$archive" ]; then
          echo "No archived run at the merge-base with \`$GITHUB_BASE_REF\` matches this run's device:"
          echo
          grep '^error' "$runs/compare.log" | sed 's/^/> /'
        else
          echo "This run made no archive (its exit code was ${EXIT_CODE:-unknown}); the job's log says why."
        fi
        echo
        echo "The run's own gate still decided: specs in counts mode gate on simulated instructions"
        echo "and DRAM bytes, the same on every x86-64 runner; time is compared only between runs of"
        echo "one device key. Runs of \`$GITHUB_BASE_REF\` recorded on this runner's kind make the base."
      } >"$comment"
    fi
    if [ -n "${ARTIFACT_URL:-}" ]; then
      printf '\nArchives of this run: [%s](%s)\n' "${INPUT_ARTIFACT_NAME:-opledger-runs}" "$ARTIFACT_URL" >>"$comment"
    fi
    repo="${GITHUB_REPOSITORY:?}"
    number="${PR_NUMBER:?PR_NUMBER, the number of the pull request, is not set}"
    posted=false
    if command -v gh >/dev/null 2>&1; then
      # The comment to update is the marked one this token wrote: anyone can post the marker
      # (a pull request's author first of all), and a comment of theirs cannot be edited. A
      # user's token knows its login; the job's own token (which cannot ask) is the Actions bot.
      me="$(gh api user --jq .login 2>/dev/null || true)"
      [ -n "$me" ] || me="github-actions[bot]"
      # Every page of the comments: on a busy pull request the marker may lie past the first 30.
      id="$(gh api --paginate "repos/$repo/issues/$number/comments" \
        --jq '.[] | [.id, .user.login, (.body | startswith("<!-- opledger-compare -->"))] | @tsv' 2>/dev/null \
        | awk -F '\t' -v me="$me" '$2 == me && $3 == "true" { print $1; exit }' || true)"
      if [ -n "$id" ]; then
        gh api -X PATCH "repos/$repo/issues/comments/$id" -F "body=@$comment" >/dev/null && posted=true
      else
        gh api -X POST "repos/$repo/issues/$number/comments" -F "body=@$comment" >/dev/null && posted=true
      fi
    fi
    if [ "$posted" != true ]; then
      # A token that may not comment (pull requests from forks get a read-only one): the
      # comment goes to the step summary instead.
      echo "::notice::opledger action: the comment could not be posted (a read-only token, as on a pull request from a fork); it is in the step summary"
      { echo; cat "$comment"; } >>"${GITHUB_STEP_SUMMARY:-/dev/null}"
    fi
    echo "posted=$posted" >>"$out"
    ;;

  finish)
    [ "$command" = run ] || exit 0
    code="${EXIT_CODE:-}"
    if [ -z "$code" ]; then
      echo "::error::opledger action: the run step gave no exit code"
      exit 2
    fi
    if [ "$code" != 0 ] && [ "${INPUT_GATE:-true}" != true ]; then
      echo "opledger exited $code; input 'gate' is false, so the job does not fail"
      exit 0
    fi
    exit "$code"
    ;;

  *)
    echo "::error::opledger action: unknown step '$step'"
    exit 2
    ;;
esac
