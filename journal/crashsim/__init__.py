"""Crash-injection harness: simulated power loss, real kill -9, injected I/O errors.

    memfs      a recording, in-memory FileSystem that knows what is durable
    model      the crash model: the disk images a power loss can leave at any point
    checker    the invariants every recovered image must satisfy
    workloads  what the engine does while it is watched; register your own with @workload
    campaign   power-loss campaigns over workloads and models, failures saved with seeds
    killtest   kill -9 of real writer processes
    faultsweep an injected I/O error at every call site of a workload
    faults     fault injection over any FileSystem: fail the Nth call of an operation

The command, `journal crash-test`, is journal/cli/crash_test.py.

docs/CRASH-TESTING.md explains the model, each invariant and how to reproduce a failure.
"""
