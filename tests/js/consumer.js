#!/usr/bin/env node
// A kafkajs consumer driven by the end-to-end tests (tests/integration/test_kafkajs.py).
//
//   node consumer.js BOOTSTRAP GROUP TOPIC [CLIENT_ID]
//
// It joins GROUP subscribed to TOPIC (auto-commit off) and prints one JSON object per line on
// stdout for every event; kafkajs's own log goes to stderr as JSON lines.
//
//   {"event":"ready"}                                   consumer and admin client connected
//   {"event":"group_join","memberId","generation","leaderId","isLeader","assignment":[p...]}
//   {"event":"heartbeat","generation","memberId"}       a heartbeat was answered without error
//   {"event":"committed","offsets":{"p":o},"generation"} commit acknowledged
//   {"event":"offsets","offsets":{"p":o}}               admin.fetchOffsets (-1: none committed)
//   {"event":"crash"|"disconnect"|"request_timeout"|"rebalancing", ...}
//   {"event":"error","what","message","type"}           a command failed (the driver goes on)
//   {"event":"closed"}                                  after `quit`, just before exiting
//
// Commands, one a line on stdin:
//   commit N          commit offset N on every partition assigned to it now
//   commit P:O,P:O    commit these offsets (consumer.commitOffsets)
//   fetch             read the group's committed offsets back (admin.fetchOffsets)
//   quit              leave the group (consumer.disconnect), close the admin client, exit 0
'use strict'

const readline = require('readline')
const { Kafka, logLevel } = require('kafkajs')
// kafkajs's GROUP_JOIN payload has no generation id; the consumer group holds it. Remember the
// group whose join is running so the listener can read it (observation only, no behaviour).
const ConsumerGroup = require('kafkajs/src/consumer/consumerGroup')

const [bootstrap, groupId, topic, clientId = 'kafkajs-test'] = process.argv.slice(2)
if (!topic) {
  process.stderr.write('usage: node consumer.js BOOTSTRAP GROUP TOPIC [CLIENT_ID]\n')
  process.exit(2)
}

const emit = obj => process.stdout.write(JSON.stringify({ ...obj, t: Date.now() / 1000 }) + '\n')

let joining = null
const joinAndSync = ConsumerGroup.prototype.joinAndSync
ConsumerGroup.prototype.joinAndSync = function (...args) {
  joining = this
  return joinAndSync.apply(this, args)
}

const logCreator = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(JSON.stringify({ level: label, namespace, message, ...extra }) + '\n')
}

const kafka = new Kafka({
  clientId,
  brokers: [bootstrap],
  logLevel: logLevel.INFO,
  logCreator,
  connectionTimeout: 1000,
  requestTimeout: 10000,
  // a restarted coordinator is back within seconds: retry often, long enough to see it
  retry: { initialRetryTime: 200, maxRetryTime: 1000, retries: 30 },
})

const consumer = kafka.consumer({
  groupId,
  sessionTimeout: 6000,
  rebalanceTimeout: 10000,
  heartbeatInterval: 500,
  maxWaitTimeInMs: 500, // the node answers Fetch empty after max_wait_ms
  retry: { initialRetryTime: 200, maxRetryTime: 1000, retries: 30 },
})
const admin = kafka.admin()

let assignment = []
let generation = null
const ev = consumer.events

consumer.on(ev.GROUP_JOIN, ({ payload }) => {
  assignment = (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
  generation = joining ? joining.generationId : null
  emit({
    event: 'group_join',
    memberId: payload.memberId,
    generation,
    leaderId: payload.leaderId,
    isLeader: payload.isLeader,
    assignment,
    groupProtocol: payload.groupProtocol,
  })
})
consumer.on(ev.HEARTBEAT, ({ payload }) => {
  generation = payload.groupGenerationId
  emit({ event: 'heartbeat', generation, memberId: payload.memberId })
})
consumer.on(ev.CRASH, ({ payload }) =>
  emit({
    event: 'crash',
    message: String(payload.error && payload.error.message),
    type: payload.error && payload.error.type,
    restart: payload.restart,
  })
)
consumer.on(ev.DISCONNECT, () => emit({ event: 'disconnect' }))
consumer.on(ev.REBALANCING, ({ payload }) => emit({ event: 'rebalancing', memberId: payload.memberId }))
consumer.on(ev.REQUEST_TIMEOUT, ({ payload }) =>
  emit({ event: 'request_timeout', apiName: payload.apiName, broker: payload.broker })
)

function parseCommit(arg) {
  if (/^\d+$/.test(arg)) {
    return assignment.map(partition => ({ topic, partition, offset: arg }))
  }
  return arg.split(',').map(pair => {
    const [p, o] = pair.split(':')
    return { topic, partition: Number(p), offset: o }
  })
}

async function fetchOffsets() {
  const res = await admin.fetchOffsets({ groupId, topics: [topic] })
  const offsets = {}
  for (const t of res) {
    if (t.topic !== topic) continue
    for (const { partition, offset } of t.partitions) offsets[partition] = Number(offset)
  }
  return offsets
}

let closing = false
async function quit() {
  if (closing) return
  closing = true
  // a node that is down would keep disconnect() retrying: give it 5 s, then go anyway
  setTimeout(() => {
    emit({ event: 'closed', timedOut: true })
    process.exit(0)
  }, 5000).unref()
  try {
    await consumer.disconnect()
    await admin.disconnect()
  } catch (e) {
    emit({ event: 'error', what: 'quit', message: String(e.message), type: e.type })
  }
  emit({ event: 'closed' })
  process.exit(0)
}

async function handle(line) {
  const [cmd, arg = ''] = line.trim().split(/\s+/, 2)
  try {
    if (cmd === 'commit') {
      const tps = parseCommit(arg)
      await consumer.commitOffsets(tps)
      const offsets = {}
      for (const { partition, offset } of tps) offsets[partition] = Number(offset)
      emit({ event: 'committed', offsets, generation })
    } else if (cmd === 'fetch') {
      emit({ event: 'offsets', offsets: await fetchOffsets() })
    } else if (cmd === 'quit') {
      await quit()
    } else if (cmd) {
      emit({ event: 'error', what: cmd, message: `unknown command ${line}` })
    }
  } catch (e) {
    emit({ event: 'error', what: cmd, message: String(e.message), type: e.type })
  }
}

async function main() {
  await admin.connect()
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({ autoCommit: false, eachMessage: async () => {} })
  emit({ event: 'ready' })
  // commands run one after the other, in the order they came
  let chain = Promise.resolve()
  const rl = readline.createInterface({ input: process.stdin })
  rl.on('line', line => {
    chain = chain.then(() => handle(line))
  })
  rl.on('close', () => {
    chain = chain.then(quit)
  })
}

process.on('SIGTERM', () => quit())
main().catch(e => {
  emit({ event: 'error', what: 'start', message: String(e.message), type: e.type })
  process.exit(1)
})
