/* leaky.cu: runtime-API request loop that leaks one KV-cache buffer per request
 * (see request_loop.cuh).  Prints its ground truth as a TL_GROUND_TRUTH line. */
#include "request_loop.cuh"

int main(int argc, char **argv) { return run_requests(argc, argv, 1, "leaky"); }
