// Stopping a training run cleanly: SIGTERM and SIGINT set a flag that the trainer polls after each step.
#include "runtime/train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <thread>

namespace cleave::runtime {
namespace {

volatile sig_atomic_t received_signal = 0;

void onStopSignal(int signal_number) {
  received_signal = signal_number;
  // The next one acts as if nothing caught it: a second Ctrl-C ends a run that is slow to stop.
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGTERM, &default_action, nullptr);
  sigaction(SIGINT, &default_action, nullptr);
}

}  // namespace

void catchStopSignals() {
  received_signal = 0;
  struct sigaction action = {};
  action.sa_handler = onStopSignal;
  action.sa_flags = SA_RESTART;  // reads, writes and waits in progress carry on
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int stopSignal() { return received_signal; }

void routeStopSignalsToOwnThread() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::thread([stop_signals] {
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    for (;;) pause();  // returns after each handler; the default action ends the process
  }).detach();
}

}  // namespace cleave::runtime
