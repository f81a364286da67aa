/**
 * Group timings the librdkafka mock broker needs: with kafkajs defaults two members ping-pong
 * partitions for a long time. Real brokers work with these too.
 */
export const GROUP_TIMINGS = { sessionTimeout: 3000, heartbeatInterval: 300, maxWaitTimeInMs: 500, rebalanceTimeout: 6000 } as const;
