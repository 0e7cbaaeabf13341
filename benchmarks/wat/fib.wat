;; fib: iterative Fibonacci mod 2^64, n steps.  Same algorithm as the Forge "fib" workload.
(module
  (func (export "run") (param $n i64) (result i64)
    (local $a i64) (local $b i64) (local $t i64)
    (local.set $b (i64.const 1))
    (loop $next
      (local.set $t (i64.add (local.get $a) (local.get $b)))
      (local.set $a (local.get $b))
      (local.set $b (local.get $t))
      (local.set $n (i64.sub (local.get $n) (i64.const 1)))
      (br_if $next (i64.ne (local.get $n) (i64.const 0))))
    (local.get $b)))
