// kafkajs transactions (tests/differential/test_applications.py): node kafkajs_txn.js BOOTSTRAP TOPIC TXN_ID GROUP
// A transactional producer commits 5 records, aborts 3, commits 2 (the last one "last"); a read_committed and a
// read_uncommitted consumer read the topic from the beginning until "last". Prints what they saw as JSON.
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, transactionalId, group] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'differential-kafkajs', brokers: [bootstrap], logLevel: logLevel.ERROR })

async function produce () {
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  let n = 0
  for (const [count, commit, prefix] of [[5, true, 'c'], [3, false, 'aborted'], [2, true, 'c']]) {
    const txn = await producer.transaction()
    const messages = []
    for (let i = 0; i < count; i++) {
      messages.push({ key: `k${n % 3}`, value: `${prefix}-${n}`, headers: { txn: String(commit), n: String(n) } })
      n++
    }
    if (commit && n === 10) messages[messages.length - 1].value = 'last'
    await txn.send({ topic, messages })
    await (commit ? txn.commit() : txn.abort())
  }
  await producer.disconnect()
}

async function consume (readUncommitted) {
  const consumer = kafka.consumer({ groupId: `${group}-${readUncommitted}`, readUncommitted })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const seen = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "last" within 30 s (saw ${seen.length})`)), 30000)
    consumer.run({
      eachMessage: async ({ message }) => {
        const value = message.value.toString()
        seen.push({ offset: Number(message.offset), key: message.key.toString(), value, txn: message.headers.txn.toString() })
        if (value === 'last') { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  return seen
}

async function main () {
  await produce()
  const admin = kafka.admin()
  await admin.connect()
  const offsets = await admin.fetchTopicOffsets(topic)
  await admin.disconnect()
  const committed = await consume(false)
  const uncommitted = await consume(true)
  console.log(JSON.stringify({ high_watermark: offsets.map(o => Number(o.high)), committed, uncommitted }))
}

main().catch(e => { console.error(e); process.exit(1) })
