;; Hostile: 19 core instances, each with its own linear memory that its
;; start function grows to 62.5 MiB (1000 pages) and fills, so the
;; component asks for ~1.2 GiB while every single memory stays under a
;; 64 MiB per-memory cap. Exports the `boxcar:handler` world's `handle`
;; (answers `ok(none)`), so the host can load it; a job never gets past
;; instantiation unless memory is capped per memory only.
(component
  (core module $hog
    (memory 1)
    (func $fill
      (drop (memory.grow (i32.const 999)))
      (memory.fill (i32.const 0) (i32.const 1) (i32.const 65536000)))
    (start $fill))
  (core instance $hog1 (instantiate $hog))
  (core instance $hog2 (instantiate $hog))
  (core instance $hog3 (instantiate $hog))
  (core instance $hog4 (instantiate $hog))
  (core instance $hog5 (instantiate $hog))
  (core instance $hog6 (instantiate $hog))
  (core instance $hog7 (instantiate $hog))
  (core instance $hog8 (instantiate $hog))
  (core instance $hog9 (instantiate $hog))
  (core instance $hog10 (instantiate $hog))
  (core instance $hog11 (instantiate $hog))
  (core instance $hog12 (instantiate $hog))
  (core instance $hog13 (instantiate $hog))
  (core instance $hog14 (instantiate $hog))
  (core instance $hog15 (instantiate $hog))
  (core instance $hog16 (instantiate $hog))
  (core instance $hog17 (instantiate $hog))
  (core instance $hog18 (instantiate $hog))
  (core instance $hog19 (instantiate $hog))

  (core module $main
    (memory (export "memory") 1)
    (global $next (mut i32) (i32.const 1024))
    ;; Bump allocator for the canonical ABI; grows memory as needed.
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      (local $end i32)
      (local.set $at
        (i32.and
          (i32.add (global.get $next) (i32.sub (local.get 2) (i32.const 1)))
          (i32.sub (i32.const 0) (local.get 2))))
      (local.set $end (i32.add (local.get $at) (local.get 3)))
      (block $fits
        (br_if $fits
          (i32.le_u (local.get $end) (i32.mul (memory.size) (i32.const 65536))))
        (br_if $fits
          (i32.ge_s
            (memory.grow
              (i32.add
                (i32.shr_u
                  (i32.sub (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
                  (i32.const 16))
                (i32.const 1)))
            (i32.const 0)))
        unreachable)
      (global.set $next (local.get $end))
      (local.get $at))
    ;; The return area at 16..48 is all zeros: `ok(none)`.
    (func (export "handle") (param i32) (result i32)
      (i32.const 16)))
  (core instance $main (instantiate $main))

  (type $scope' (record (field "scope-type" string) (field "scope-id" string)))
  (export $scope "scope" (type $scope'))
  (type $job' (record
    (field "id" string)
    (field "job-type" string)
    (field "payload" string)
    (field "attempt" u32)
    (field "max-attempts" u32)
    (field "scope" (option $scope))
    (field "schedule-id" (option string))
    (field "parent-id" (option string))
    (field "deadline-ms" u64)))
  (export $job "job" (type $job'))
  (type $retryable' (record
    (field "message" string)
    (field "retry-after-ms" (option u64))
    (field "consumes-attempt" bool)))
  (export $retryable "retryable-error" (type $retryable'))
  (type $terminal' (record
    (field "message" string)
    (field "code" (option string))
    (field "details" (option string))))
  (export $terminal "terminal-error" (type $terminal'))
  (type $job-error' (variant (case "retryable" $retryable) (case "terminal" $terminal)))
  (export $job-error "job-error" (type $job-error'))

  (func $handle (param "job" $job) (result (result (option string) (error $job-error)))
    (canon lift (core func $main "handle")
      (memory (core memory $main "memory"))
      (realloc (core func $main "realloc"))))
  (export "handle" (func $handle)))
