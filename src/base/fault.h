/* fault.h — fault injection for tests: named points in the code that can be made to fail.
 *
 * G4_FAULT="name:N[,name:N+...]" (read once, at the first call) makes the N-th call of
 * g4_fault_hit("name") return 1 (with "N+": that call and every later one). Tests drive error
 * paths that real runs reach only when memory runs out, without a custom allocator. Unset, a hit
 * costs one relaxed atomic load. Knows nothing about what the points guard. */
#ifndef G4_BASE_FAULT_H
#define G4_BASE_FAULT_H

/* 1 when this call of the point should fail (the caller takes its error path). */
int g4_fault_hit(const char *name);
/* Replaces the setting, as if G4_FAULT held spec (NULL or "": none); resets the counts.
 * For unit tests, between runs (not while other threads hit points). G4_EINVAL when malformed. */
int g4_fault_set(const char *spec);

#endif
