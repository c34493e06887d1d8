#!/usr/bin/env bash
# The built-in model packages (src/models/) include only the public SDK (power/...), the
# standard library and their own folder's headers: never an internal header of Power's core
# (base/, format/, kernels/, device/, host/, runtime/, ...). The build enforces the same (the
# packages' include path is include/ and src/models/ only); this check names the offending
# line. Usage: package_includes_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?source dir}/src/models
bad=0
checked=0
while IFS= read -r -d '' f; do
  checked=$((checked + 1))
  while IFS= read -r line; do
    inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"$line")
    case "$inc" in
      power/*) continue ;;
    esac
    if [[ -f "$src/$inc" ]]; then continue; fi
    echo "package_includes: $f includes \"$inc\": not an SDK header nor a package header"
    bad=1
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
done < <(find "$src" -name '*.h' -print0 -o -name '*.cpp' -print0)
if ((checked == 0)); then echo "package_includes: no package sources under $src"; exit 1; fi
if ((bad)); then exit 1; fi
echo "package_includes: $checked files include only the SDK and package headers"
