/* system.h: what a result records about the machine it ran on (bench JSON, reports). */
#ifndef TP_SYSTEM_H
#define TP_SYSTEM_H

#include <stddef.h>

/* One GPU, as tp_gpu_query (exec/cuda/engine/cuda_engine.h) fills it; present 0 where there is none (or the
 * build has no CUDA). */
typedef struct {
    int present;
    char name[256];
    int sm;                  /* compute capability x 10 */
    int sm_count;
    double mem_bytes;
    double l2_bytes;
    char driver[96];         /* NVIDIA driver version (NVML), "unknown" if NVML is absent */
    int driver_cuda;         /* CUDA version the driver supports, e.g. 13000 */
    int runtime_cuda;        /* CUDA runtime version linked in */
    size_t cublaslt_version; /* e.g. 130100 */
} tp_gpu_info;

/* The host CPU's model name (/proc/cpuinfo), "unknown" where it cannot be read. */
void tp_host_cpu_name(char *buf, size_t n);

/* The host memory this process can still take, in bytes: /proc/meminfo's MemAvailable (else the physical memory),
 * lowered to what a cgroup memory limit leaves (v2 memory.max - memory.current, v1 memory.limit_in_bytes -
 * memory.usage_in_bytes) and to the address space an RLIMIT_AS (ulimit -v) leaves; what receives where the figure
 * came from ("MemAvailable", "physical memory", "the cgroup's limit", "ulimit -v"). 0 where none can be read. */
double tp_host_mem_available(char *what, size_t n);

#endif
