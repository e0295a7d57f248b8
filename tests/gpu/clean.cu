/* clean.cu: the same request loop as leaky.cu, evicting every KV-cache buffer:
 * tensorleak must report no leak and no growth. */
#include "request_loop.cuh"

int main(int argc, char **argv) { return run_requests(argc, argv, 0, "clean"); }
