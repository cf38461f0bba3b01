# Splits a callgrind profile (test/bench/op_cost.cpp run under
# --separate-callers, --toggle-collect='*::cost_*') by what op_cost was
# doing and by whose code ran. Each function's context there is its name
# followed by its callers' ("fn'caller'caller's caller..."), so every
# instruction's context names op_cost's loop (loop_send() ...) and counted
# function (cost_post() ...) above it. Prints one line per phase
# ("send.post", "batch.repost_batch"; the loop is "-" outside -o all):
#   PHASE provider INSTR rdma INSTR app INSTR allocs CALLS
# rdma: libibverbs and the device's userspace driver (librxe-rdmav*.so ...):
# the floor any provider pays for the same work request; app: op_cost's own
# instructions; provider: all the rest (the provider's object, libfabric's
# for its verbs). The system libraries (libc, libstdc++, libgcc, the dynamic
# loader) count for whoever called them: the write() under rxe's doorbell is
# rdma-core's, a memcpy or mutex the provider calls is the provider's.
# allocs: calls of malloc and its siblings from inside the phase. A context that names no counted function
# is printed as phase "?" (its chain was cut: raise --separate-callers).
# With -v rxm=1 (test/bench/rxm_cost.cpp, a provider under ofi_rxm) the
# provider's instructions are split once more and two fields follow:
#   ... core INSTR rxm INSTR
# core: the provider below rxm (evd's object, or verbs' vrb_* functions in
# libfabric.so); rxm: rxm_* and everything else of libfabric's. A function
# that is neither (libfabric's util code, a libc call) is counted for the
# nearest of them in its chain of callers.
# POSIX awk (mawk and gawk alike).
function defname(s, table,    id, rest) {
    # "(id) name" defines id; "(id)" names it again; "name" alone is uncompressed
    if (s ~ /^\([0-9]+\)/) {
        id = substr(s, 2, index(s, ")") - 2)
        rest = substr(s, index(s, ")") + 1)
        sub(/^ /, "", rest)
        if (rest != "") table[id] = rest
        return table[id]
    }
    return s
}
function phase(ctx,    n, parts, i, cost, loop, m) {
    if (ctx in phase_of) return phase_of[ctx]
    n = split(ctx, parts, "'")
    cost = ""; loop = "-"
    for (i = 1; i <= n; i++) {
        if (cost == "" && match(parts[i], /::cost_[a-z_]+\(/))
            cost = substr(parts[i], RSTART + 7, RLENGTH - 8)
        if (match(parts[i], /::loop_[a-z0-9_]+\(/))
            loop = substr(parts[i], RSTART + 7, RLENGTH - 8)
    }
    phase_of[ctx] = cost == "" ? "?" : loop "." cost
    return phase_of[ctx]
}
function whose(ob) {
    if (ob ~ /\/(op_cost|rxm_cost|floor_cost)$/) return "app"
    if (ob ~ /libibverbs\.so|-rdmav[0-9]+\.so/) return "rdma"
    if (ob ~ /\/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^\/]*)\.so[^\/]*$|vdso/) return "system"
    return "provider"
}
# Whose a context's instructions are: its object's, or for a system
# library, that of the first caller in its chain that is not one.
function owner(ctx, ob,    w, n, parts, i) {
    w = whose(ob)
    if (w != "system") return w
    n = split(ctx, parts, "'")
    for (i = 2; i <= n; i++)
        if ((parts[i] in obj_of) && (w = whose(obj_of[parts[i]])) != "system") return w
    return "provider"
}
# Whose of the two a provider context is under -v rxm=1: the innermost of
# its chain that is evd's or verbs' (core) or rxm's.
function below_rxm(ctx,    n, parts, i, f) {
    n = split(ctx, parts, "'")
    for (i = 1; i <= n; i++) {
        f = parts[i]
        if (f ~ /^evd::/ || f ~ /^vrb_/ || ((f in obj_of) && obj_of[f] ~ /libevd-fi\.so/)) return "core"
        if (f ~ /^rxm_/) return "rxm"
    }
    return "rxm"
}
BEGIN { pending = 0 }
/^ob=/   { ob = defname(substr($0, 4), obs); next }
/^cob=/  { defname(substr($0, 5), obs); next }
/^fn=/   {
    fn = defname(substr($0, 4), fns)
    base = fn
    sub(/'.*/, "", base)
    obj_of[base] = ob
    next
}
/^cfn=/  { cfn = defname(substr($0, 5), fns); next }
/^calls=/ {
    pending = 1
    base = cfn
    sub(/'.*/, "", base)
    if (base ~ /^(__libc_)?(malloc|calloc|realloc|memalign|posix_memalign|aligned_alloc)$/) {
        split(substr($0, 7), c, " ")
        allocs[phase(fn)] += c[1]
        seen[phase(fn)] = 1
    }
    next
}
/^[0-9+*-]/ {
    if (pending) { pending = 0; next }  # a call's inclusive cost: counted where it ran
    self[fn, ob] += $2
    next
}
END {
    for (k in self) {
        split(k, kk, SUBSEP)
        p = phase(kk[1])
        w = owner(kk[1], kk[2])
        cost[p, w] += self[k]
        if (rxm && w == "provider") cost[p, below_rxm(kk[1])] += self[k]
        seen[p] = 1
    }
    for (p in seen) {
        printf "%s provider %d rdma %d app %d allocs %d", p, cost[p, "provider"], cost[p, "rdma"], cost[p, "app"], allocs[p]
        if (rxm) printf " core %d rxm %d", cost[p, "core"], cost[p, "rxm"]
        printf "\n"
    }
}
