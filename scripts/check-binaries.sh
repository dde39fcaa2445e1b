#!/usr/bin/env bash
# Fails when git tracks an executable binary (ELF, Mach-O, PE): build outputs
# belong in .gitignore, never in the repository.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bad=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46|feedface|feedfacf|cefaedfe|cffaedfe|cafebabe) bad+=("$f") ;;
    4d5a*) bad+=("$f") ;;
  esac
done < <(git ls-files -z)
if [ ${#bad[@]} -gt 0 ]; then
  echo "tracked executable binaries (remove with git rm --cached and add to .gitignore):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
