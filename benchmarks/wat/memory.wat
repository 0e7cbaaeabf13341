;; memory: `passes` times, copy 128 KiB of u64 words to the next 128 KiB adding the offset,
;; summing what was written.  Same algorithm as the Forge "memory" workload.
(module
  (memory 4)
  (func (export "run") (param $passes i64) (result i64)
    (local $offset i32) (local $word i64) (local $sum i64)
    (loop $pass
      (local.set $offset (i32.const 0))
      (loop $copy
        (local.set $word (i64.add (i64.load (local.get $offset)) (i64.extend_i32_u (local.get $offset))))
        (i64.store offset=131072 (local.get $offset) (local.get $word))
        (local.set $sum (i64.add (local.get $sum) (local.get $word)))
        (local.set $offset (i32.add (local.get $offset) (i32.const 8)))
        (br_if $copy (i32.lt_u (local.get $offset) (i32.const 131072))))
      (local.set $passes (i64.sub (local.get $passes) (i64.const 1)))
      (br_if $pass (i64.ne (local.get $passes) (i64.const 0))))
    (local.get $sum)))
