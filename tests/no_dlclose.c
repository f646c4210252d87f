/* Preloaded into MPI test processes of the sanitizer build: dlclose does
 * nothing, so that Open MPI's components (loaded with dlopen, closed at
 * MPI_Finalize) are still mapped when LeakSanitizer reports at exit. Their
 * allocations then carry their library's name and tests/lsan_mpi.supp can
 * leave them out; without this they are "<unknown module>" and nothing
 * separates Open MPI's own leaks from mpmd's. */
int dlclose(void *handle);
int dlclose(void *handle) {
    (void)handle;
    return 0;
}
