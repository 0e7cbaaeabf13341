;; calls: naive recursive Fibonacci, one call per node.  Same algorithm as the Forge "calls" workload.
(module
  (func $fib (export "run") (param $n i64) (result i64)
    (if (result i64) (i64.lt_u (local.get $n) (i64.const 2))
      (then (local.get $n))
      (else
        (i64.add
          (call $fib (i64.sub (local.get $n) (i64.const 1)))
          (call $fib (i64.sub (local.get $n) (i64.const 2))))))))
