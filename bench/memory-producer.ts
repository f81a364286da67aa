/**
 * Producer for the memory suite, run as a child process so its buffers do not count in the
 * consumer's memory. librdkafka's mock cluster keeps only about 5 MB per partition (older records
 * are deleted, about 65,000 of these records per partition), so 1M records cannot be pre-filled:
 * this process produces in chunks (acks: all) and keeps at most `backlog` records ahead of what
 * the parent reports as settled.
 *
 * argv: brokers topic partitions total backlog. IPC in: { settled }. IPC out: { produced } after each chunk.
 */
import { Kafka, logLevel } from 'kafkajs';

const [brokers = '', topic = '', partitionsText = '4', totalText = '0', backlogText = '100000'] = process.argv.slice(2);
const partitions = Number(partitionsText);
const total = Number(totalText);
const backlog = Number(backlogText);
const CHUNK = 5000;

let settled = 0;
process.on('message', (message: { settled?: number }) => {
  if (typeof message.settled === 'number') settled = message.settled;
});

const kafka = new Kafka({ clientId: 'inboxed-bench-memory-producer', brokers: brokers.split(','), logLevel: logLevel.NOTHING });
const producer = kafka.producer({ allowAutoTopicCreation: false });
await producer.connect();
let produced = 0;
while (produced < total) {
  if (produced - settled >= backlog) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    continue;
  }
  const messages = [];
  for (let i = produced; i < Math.min(total, produced + CHUNK); i++) {
    messages.push({
      partition: i % partitions,
      headers: { 'message-id': `pay-${i}` },
      value: JSON.stringify({ id: i, amountCents: 100 + (i % 5000), currency: 'EUR' }),
    });
  }
  await producer.send({ topic, acks: -1, messages });
  produced += messages.length;
  process.send?.({ produced });
}
await producer.disconnect();
process.disconnect?.();
