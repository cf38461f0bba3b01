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
    if (ob ~ /\/op_cost$/) return "app"
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
        cost[p, owner(kk[1], kk[2])] += self[k]
        seen[p] = 1
    }
    for (p in seen)
        printf "%s provider %d rdma %d app %d allocs %d\n", p, cost[p, "provider"], cost[p, "rdma"], cost[p, "app"], allocs[p]
}
