// The floor of a relay hop on this machine, with nothing of gm in it: a client writes a
// 200-byte line and waits for it back, (a) straight to an echoing "worker" process, (b)
// through a "relay" process of two blocking threads (one each way) whose link to the worker
// is two pipes, (c) the same with one Unix socket for both ways. The worker waits in epoll
// (edge-triggered, readable only) as gm's worker does. p50 of 20,000 round trips each.
//   gcc -O2 -pthread -o relay_floor bench/relay_floor.c && taskset -c 0 ./relay_floor
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { N = 20000, LINE = 200 };
static int relay_in, relay_out, worker_side_in, worker_side_out;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void forward(int from, int to) {
    char buf[65536];
    for (;;) {
        ssize_t n = read(from, buf, sizeof buf);
        if (n <= 0 || write(to, buf, n) != n) _exit(0);
    }
}

static void *upstream(void *unused) {
    (void)unused;
    forward(relay_in, worker_side_out);
    return NULL;
}

static void worker(int in, int out) {
    fcntl(in, F_SETFL, O_NONBLOCK);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = in};
    epoll_ctl(ep, EPOLL_CTL_ADD, in, &ev);
    char buf[65536];
    for (;;) {
        struct epoll_event got[4];
        epoll_wait(ep, got, 4, -1);
        for (;;) {
            ssize_t n = read(in, buf, sizeof buf);
            if (n == 0) _exit(0);
            if (n < 0) break;
            if (write(out, buf, n) != n) _exit(0);
        }
    }
}

// mode 0: direct; 1: relay over pipes; 2: relay over a socket.
static double run(int mode) {
    int to_relay[2], from_relay[2];
    if (pipe(to_relay) || pipe(from_relay)) exit(1);
    int w_in, w_out, r_in, r_out;
    if (mode == 2) {
        int s[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s)) exit(1);
        w_in = w_out = s[1];
        r_in = r_out = s[0];
    } else {
        int a[2], b[2];
        if (pipe2(a, O_CLOEXEC) || pipe2(b, O_CLOEXEC)) exit(1);
        w_in = a[0], r_out = a[1], r_in = b[0], w_out = b[1];
    }
    if (mode == 0) w_in = to_relay[0], w_out = from_relay[1];
    pid_t w = fork();
    if (w == 0) worker(w_in, w_out);
    pid_t r = -1;
    if (mode != 0 && (r = fork()) == 0) {
        relay_in = to_relay[0], relay_out = from_relay[1];
        worker_side_in = r_in, worker_side_out = r_out;
        pthread_t t;
        pthread_create(&t, NULL, upstream, NULL);
        forward(worker_side_in, relay_out);
    }
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    static double took[N];
    for (int i = 0; i < N; i++) {
        double t = now_us();
        if (write(to_relay[1], buf, LINE) != LINE) exit(1);
        for (int got = 0; got < LINE;) {
            ssize_t n = read(from_relay[0], buf, sizeof buf);
            if (n <= 0) exit(1);
            got += n;
        }
        took[i] = now_us() - t;
    }
    kill(w, SIGKILL);
    if (r > 0) kill(r, SIGKILL);
    while (wait(NULL) > 0) {}
    qsort(took, N, sizeof took[0], by_value);
    return took[N / 2];
}

int main(void) {
    for (int round = 0; round < 3; round++) {
        double direct = run(0), pipes = run(1), socket = run(2);
        printf("round trip p50: direct %.1f µs, relay over pipes %.1f (adds %.1f), relay over a socket %.1f (adds %.1f)\n",
               direct, pipes, pipes - direct, socket, socket - direct);
    }
    return 0;
}
