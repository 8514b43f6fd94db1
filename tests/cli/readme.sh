#!/usr/bin/env bash
# tests/cli/readme.sh - the README's "Using nf" block runs as written: its first line puts the
# default build's nf on the PATH (build/float, where `make` and `make demo` put it), and every
# following line is run, in order, by bash -e with that nf (here: the nf under test) as `nf`.  The
# only change: each `nf fit` trains for at most 4 seconds (--time 4 appended by the `nf` on the
# PATH), so the block takes seconds instead of the minutes of its 5000- and 3000-step fits; what
# each command accepts and writes is the same.  Run by `make check` with NF set to the nf binary.
# shellcheck source-path=SCRIPTDIR source=lib.bash
. "$(dirname "$0")/lib.bash"

awk '/^## Using nf/ {on = 1; next} /^## / {on = 0} on && /^    [^ ]/ {sub(/^    /, ""); sub(/ +# .*$/, ""); print}' \
    "$ROOT/README.md" >block.sh
first=$(head -1 block.sh)
check "the block starts by putting build/float (the default build's nf) on the PATH ($first)" \
    test "$first" = 'export PATH="$PWD/build/float:$PATH"'
b=$(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u NF_DOUBLE -u SANITIZE -u CC make -C "$ROOT" -pn compile 2>/dev/null |
    awk '$1 == "B" && $2 == ":=" {print $3; exit}')
check "a plain make builds into build/float, so nf is build/float/nf (B := $b)" test "$b" = build/float
tail -n +2 block.sh >commands.sh
ncmd=$(wc -l <commands.sh)
check "the block has its commands, all nf ($ncmd)" \
    bash -c "[ $ncmd -ge 10 ] && ! grep -qv '^nf ' commands.sh"

mkdir -p "$T/bin"
cat >"$T/bin/nf" <<EOF
#!/usr/bin/env bash
if [ "\${1:-}" = fit ] && [ "\${2:-}" != --resume ]; then exec "$NF" "\$@" --time 4; fi
exec "$NF" "\$@"
EOF
chmod +x "$T/bin/nf"
PATH="$T/bin:$PATH" timeout -k 5 "${NF_CLI_TIMEOUT:-120}" bash -e commands.sh >"$T/out" 2>"$T/err"
rc=$?
check "the README's $ncmd nf commands run as written (exit $rc)" test $rc = 0
[ $rc = 0 ] || sed 's/^/    /' "$T/err" | tail -5
for f in train.h5 model.h5 test.h5 samples.h5 logp.h5 density.png q.h5 q.png; do
    check "the block wrote $f" test -s "$f"
done
check "eval --json printed one JSON line with the KL gap" grep -qE '^\{"n": 20000, "dim": 2, .*"kl_gap": ' "$T/out"
check "eval of the variational model printed the ELBO and log Z" bash -c "grep -qi 'elbo' '$T/out' && grep -qi 'log Z' '$T/out'"
check "no temporary files left behind" test -z "$(stray_tmp)"
finish
