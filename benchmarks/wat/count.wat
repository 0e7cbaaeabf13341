;; count: acc += i; i += 1; loop while i < n.  Same algorithm as the Forge "count" workload.
(module
  (func (export "run") (param $n i64) (result i64)
    (local $acc i64) (local $i i64)
    (loop $next
      (local.set $acc (i64.add (local.get $acc) (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $next (i64.lt_u (local.get $i) (local.get $n))))
    (local.get $acc)))
