/* What a syscall costs a thread that just woke: the run-queue clock's pread of
 * /proc/thread-self/schedstat, and clock_gettime(CLOCK_THREAD_CPUTIME_ID), each in a loop
 * (warm) and once after every 20 ms sleep (cold, as on a worker at 40 offers/s).
 *   gcc -D_GNU_SOURCE -O2 -o /tmp/coldsyscall coldsyscall.c && /tmp/coldsyscall */
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static long long ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(void) {
    int fd = open("/proc/thread-self/schedstat", O_RDONLY);
    char buf[100];
    struct timespec ts;
    const int warm = 200000, cold = 200;
    long long t0 = ns();
    for (int i = 0; i < warm; i++) pread(fd, buf, 96, 0);
    printf("pread schedstat, warm:      %6.0f ns\n", (double)(ns() - t0) / warm);
    t0 = ns();
    for (int i = 0; i < warm; i++) clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    printf("thread CPU clock, warm:     %6.0f ns\n", (double)(ns() - t0) / warm);
    long long total = 0;
    for (int i = 0; i < cold; i++) {
        usleep(20000);
        long long a = ns();
        pread(fd, buf, 96, 0);
        total += ns() - a;
    }
    printf("pread schedstat, woken:     %6.0f ns\n", (double)total / cold);
    total = 0;
    for (int i = 0; i < cold; i++) {
        usleep(20000);
        long long a = ns();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        total += ns() - a;
    }
    printf("thread CPU clock, woken:    %6.0f ns\n", (double)total / cold);
    return 0;
}
