#!/usr/bin/env node
// kafkajs consuming (or producing) real records, for the gateway's client tests
// (tests/gateway/test_clients.py): the twin of tests/support/record_client.py, same command line
// and JSON lines (its docstring has them).
//
//   node records.js kafkajs consume BOOTSTRAP TOPIC GROUP NAME INSTANCE SESSION_TIMEOUT_MS
//   node records.js kafkajs produce BOOTSTRAP TOPIC START COUNT
//
// kafkajs has no static membership (no group.instance.id): INSTANCE must be "-".
'use strict'

const readline = require('readline')
const { Kafka, logLevel } = require('kafkajs')
// kafkajs's GROUP_JOIN payload has no generation id; the consumer group holds it (observation)
const ConsumerGroup = require('kafkajs/src/consumer/consumerGroup')

const emit = obj => process.stdout.write(JSON.stringify({ ...obj, t: Date.now() / 1000 }) + '\n')

let joining = null
const joinAndSync = ConsumerGroup.prototype.joinAndSync
ConsumerGroup.prototype.joinAndSync = function (...args) {
  joining = this
  return joinAndSync.apply(this, args)
}

const logCreator = () => ({ namespace, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(JSON.stringify({ level: label, namespace, message, ...extra }) + '\n')
}

const [client, mode, bootstrap, topic, ...rest] = process.argv.slice(2)
if (client !== 'kafkajs' || !topic) {
  process.stderr.write('usage: node records.js kafkajs consume|produce BOOTSTRAP TOPIC ...\n')
  process.exit(2)
}

const retry = { initialRetryTime: 200, maxRetryTime: 1000, retries: 60 }

function kafka(clientId) {
  return new Kafka({
    clientId,
    brokers: [bootstrap],
    logLevel: logLevel.INFO,
    logCreator,
    connectionTimeout: 2000,
    requestTimeout: 15000,
    retry,
  })
}

async function produce(start, count) {
  const producer = kafka('records-producer').producer({ retry })
  await producer.connect()
  const messages = []
  for (let i = start; i < start + count; i++) {
    messages.push({ key: String(i), value: `record-${i}` })
  }
  await producer.send({ topic, acks: -1, messages })
  await producer.disconnect()
  emit({ event: 'produced', count })
  process.exit(0)
}

async function consume(groupId, name, instance, sessionTimeout) {
  if (instance !== '-') throw new Error('kafkajs has no static membership (group.instance.id)')
  const consumer = kafka(name).consumer({
    groupId,
    sessionTimeout,
    rebalanceTimeout: 20000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
    retry,
  })
  const ev = consumer.events
  consumer.on(ev.GROUP_JOIN, ({ payload }) => {
    const partitions = (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
    emit({ event: 'assigned', partitions, generation: joining ? joining.generationId : null })
  })
  consumer.on(ev.REBALANCING, () => emit({ event: 'rebalancing' }))
  consumer.on(ev.CRASH, ({ payload }) =>
    emit({ event: 'crash', error: String(payload.error && payload.error.message), restart: payload.restart })
  )

  let closing = false
  async function quit() {
    if (closing) return
    closing = true
    setTimeout(() => {
      emit({ event: 'closed', timedOut: true })
      process.exit(0)
    }, 10000).unref()
    await consumer.disconnect().catch(() => {})
    emit({ event: 'closed' })
    process.exit(0)
  }

  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      if (!batch.messages.length) return
      // the consumer's own position moves on resolved offsets only (the commit is ours)
      resolveOffset(batch.lastOffset())
      const records = batch.messages.map(m => [batch.partition, Number(m.offset), m.value.toString()])
      emit({ event: 'records', records })
      const next = String(Number(batch.lastOffset()) + 1)
      const offsets = [{ topic, partition: batch.partition, offset: next }]
      // synchronous commit after the batch, retried (kafkajs retries inside too) for 30 s
      const deadline = Date.now() + 30000
      for (;;) {
        try {
          await consumer.commitOffsets(offsets)
          emit({ event: 'committed', offsets: { [batch.partition]: Number(next) } })
          break
        } catch (e) {
          emit({ event: 'commit_error', error: String(e.message) })
          if (!isRunning() || isStale() || Date.now() > deadline) throw e
          await new Promise(resolve => setTimeout(resolve, 200))
          await heartbeat().catch(() => {})
        }
      }
    },
  })
  emit({ event: 'ready' })
  const rl = readline.createInterface({ input: process.stdin })
  rl.on('line', line => {
    if (line.trim() === 'quit') quit()
  })
  rl.on('close', quit)
  process.on('SIGTERM', quit)
}

const main = mode === 'produce'
  ? () => produce(Number(rest[0]), Number(rest[1]))
  : () => consume(rest[0], rest[1], rest[2], Number(rest[3]))
main().catch(e => {
  emit({ event: 'error', error: String(e && e.message) })
  process.exit(1)
})
