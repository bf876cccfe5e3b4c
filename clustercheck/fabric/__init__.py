"""The fabric between GPUs and nodes as NCCL saw it: NCCL debug logs read (`nccl_debug`) and each
collective's account of the library, transports, NVLS state and algorithms (`comm`)."""
