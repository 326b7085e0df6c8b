#!/usr/bin/env bash
# Fails when git tracks an executable binary: an ELF, Mach-O or PE file.
# Binaries are build output (make build and the bench tools write them to
# bin/, which is ignored); one committed by accident stays in the pack
# forever, so make test stops it before it reaches main. Reads the first
# bytes of every tracked file that is in the work tree.
set -euo pipefail
cd "$(dirname "$0")/.."

# magic FILE OFFSET: four bytes of FILE at OFFSET, as hex; fewer (or none)
# past the end of the file.
magic() {
  { od -An -tx1 -j"$2" -N4 -- "$1" 2>/dev/null || true; } | tr -d ' \n'
}

found=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue # deleted in the work tree, or a submodule
  kind=
  case $(magic "$f" 0) in
    7f454c46) kind=ELF ;;
    feedface | feedfacf | cefaedfe | cffaedfe) kind=Mach-O ;;
    cafebabe | bebafeca) kind="Mach-O universal" ;;
    4d5a*)
      # "MZ" starts a PE file, and some text: a PE file also has
      # "PE\0\0" at the offset stored at 0x3c.
      off=$(od -An -tu4 -j60 -N4 -- "$f" | tr -d ' \n')
      if [ -n "$off" ] && [ "$(magic "$f" "$off")" = 50450000 ]; then
        kind=PE
      fi
      ;;
  esac
  if [ -n "$kind" ]; then
    found+=("$f ($kind)")
  fi
done < <(git ls-files -z)

if [ ${#found[@]} -gt 0 ]; then
  echo "check-binaries: git tracks executable binaries; build output belongs in bin/ (ignored):" >&2
  printf '  %s\n' "${found[@]}" >&2
  echo "remove them with: git rm --cached FILE (and delete or move the file)" >&2
  exit 1
fi
