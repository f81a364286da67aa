/*
 * A Kafka-protocol test broker: librdkafka's mock cluster in a process of its own.
 *
 * The mock implements produce, fetch, consumer groups and offset commits, but not CreateTopics,
 * and auto-creates topics with 4 partitions. Tests need topics with chosen partition counts, so
 * this program creates them on request through rd_kafka_mock_topic_create():
 *
 *   argv:   [broker_count]            (default 1)
 *   stdout: "bootstrap <host:port,...>" once the cluster listens
 *   stdin:  "create <topic> <partitions>" per line  ->  stdout "ok <topic>" | "error <topic> <reason>"
 *
 * It exits when stdin closes (its parent went away, even by SIGKILL) or on SIGTERM/SIGINT, so a
 * crashed test run never leaves a broker behind.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t stopping = 0;

static void on_signal(int sig) {
  (void)sig;
  stopping = 1;
  /* stdin reads are interrupted by the signal (no SA_RESTART), so the loop below ends. */
}

int main(int argc, char **argv) {
  int broker_count = argc > 1 ? atoi(argv[1]) : 1;
  char errstr[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_t *rk;
  rd_kafka_mock_cluster_t *mcluster;
  char line[1024];
  struct sigaction sa;

  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  if (broker_count < 1) broker_count = 1;
  /* The handle only does the mock's book keeping; it never connects anywhere. */
  rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr));
  rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (!rk) {
    fprintf(stderr, "rd_kafka_new failed: %s\n", errstr);
    return 1;
  }
  mcluster = rd_kafka_mock_cluster_new(rk, broker_count);
  if (!mcluster) {
    fprintf(stderr, "rd_kafka_mock_cluster_new failed\n");
    rd_kafka_destroy(rk);
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("bootstrap %s\n", rd_kafka_mock_cluster_bootstraps(mcluster));

  while (!stopping && fgets(line, sizeof(line), stdin) != NULL) {
    char topic[512];
    int partitions = 0;
    if (sscanf(line, "create %511s %d", topic, &partitions) == 2 && partitions > 0) {
      rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mcluster, topic, partitions, 1);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        printf("ok %s\n", topic);
      } else {
        printf("error %s %s\n", topic, rd_kafka_err2str(err));
      }
    } else {
      printf("error - unknown command\n");
    }
  }

  rd_kafka_mock_cluster_destroy(mcluster);
  rd_kafka_destroy(rk);
  return 0;
}
