// @platformatic/kafka with groupProtocol 'consumer' (KIP-848), read_committed (tests/differential/test_applications.py):
// node platformatic_consumer.js BOOTSTRAP TOPIC GROUP -- reads TOPIC from the earliest offset until the value
// "last" and prints the records it got as JSON.
const { Consumer, stringDeserializers } = require('@platformatic/kafka')

const [bootstrap, topic, groupId] = process.argv.slice(2)

async function main () {
  const consumer = new Consumer({
    clientId: 'differential-platformatic',
    groupId,
    groupProtocol: 'consumer',
    bootstrapBrokers: [bootstrap],
    deserializers: stringDeserializers,
    isolationLevel: 1 // READ_COMMITTED
  })
  const stream = await consumer.consume({ topics: [topic], mode: 'earliest', autocommit: true })
  const seen = []
  const timer = setTimeout(() => { console.error(`no "last" within 30 s (saw ${seen.length})`); process.exit(1) }, 30000)
  for await (const message of stream) {
    seen.push({ offset: Number(message.offset), key: message.key, value: message.value, txn: message.headers.get('txn') })
    if (message.value === 'last') break
  }
  clearTimeout(timer)
  await stream.close()
  await consumer.close()
  console.log(JSON.stringify(seen))
}

main().catch(e => { console.error(e); process.exit(1) })
