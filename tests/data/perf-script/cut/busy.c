#include <pthread.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) static void leaf(void) { for (int i = 0; i < 1000; i++) sink += i; }
__attribute__((noinline)) static void mid(void) { leaf(); }
static void *worker(void *a) {
    struct timespec s, n; clock_gettime(CLOCK_MONOTONIC, &s);
    do { mid(); clock_gettime(CLOCK_MONOTONIC, &n); } while (n.tv_sec - s.tv_sec < 2);
    return a;
}
int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, worker, 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    return 0;
}
