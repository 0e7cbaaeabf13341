;; sieve: Eratosthenes over n byte flags, then count the primes below n.
;; Same algorithm as the Forge "sieve" workload; n <= 1,048,576 (16 pages).
(module
  (memory 16)
  (func (export "run") (param $n i64) (result i64)
    (local $i i64) (local $j i64) (local $count i64)
    (memory.fill (i32.const 0) (i32.const 0) (i32.wrap_i64 (local.get $n)))
    (local.set $i (i64.const 2))
    (block $done
      (loop $outer
        (br_if $done (i64.ge_u (i64.mul (local.get $i) (local.get $i)) (local.get $n)))
        (if (i32.eqz (i32.load8_u (i32.wrap_i64 (local.get $i))))
          (then
            (local.set $j (i64.mul (local.get $i) (local.get $i)))
            (loop $inner
              (i32.store8 (i32.wrap_i64 (local.get $j)) (i32.const 1))
              (local.set $j (i64.add (local.get $j) (local.get $i)))
              (br_if $inner (i64.lt_u (local.get $j) (local.get $n))))))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $outer)))
    (local.set $i (i64.const 2))
    (loop $tally
      (local.set $count (i64.add (local.get $count) (i64.load8_u (i32.wrap_i64 (local.get $i)))))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $tally (i64.lt_u (local.get $i) (local.get $n))))
    (i64.sub (i64.sub (local.get $n) (local.get $count)) (i64.const 2))))
