// Kafka 4.4's own KafkaShareConsumer through one story, for tests/differential/test_behaviour.py.
//
//   java -cp <kafka classpath>:<dir> ShareStory BOOTSTRAP GROUP TOPIC ROUND...
//
// A ROUND is "N:FIRST-LAST=TYPE,..." : poll (explicit acknowledgement) until N records came, acknowledging
// each as it arrives with the TYPE of its offset's range (ACCEPT when none names it), then commitSync.
// Prints "record ROUND OFFSET DELIVERY_COUNT VALUE" per record, "commit ROUND PARTITION ok|ERROR" per
// partition, and "lock_ms MS" (the acquisition lock the broker announced).
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareStory {
    public static void main(String[] args) {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[1]);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(args[2]));
            for (int round = 3; round < args.length; round++) {
                String[] spec = args[round].split(":", 2);
                int want = Integer.parseInt(spec[0]);
                int got = 0;
                long deadline = System.currentTimeMillis() + 60_000;
                while (got < want && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        got++;
                        System.out.println("record " + (round - 2) + " " + r.offset() + " "
                            + r.deliveryCount().map(String::valueOf).orElse("-") + " " + r.value());
                        c.acknowledge(r, typeOf(spec.length > 1 ? spec[1] : "", r.offset()));
                    }
                }
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : c.commitSync().entrySet()) {
                    System.out.println("commit " + (round - 2) + " " + e.getKey().partition() + " "
                        + e.getValue().map(x -> x.getClass().getSimpleName()).orElse("ok"));
                }
            }
            System.out.println("lock_ms " + c.acquisitionLockTimeoutMs().map(String::valueOf).orElse("-"));
        }
    }

    static AcknowledgeType typeOf(String spec, long offset) {
        for (String part : spec.split(",")) {
            if (part.isEmpty()) continue;
            String[] kv = part.split("=");
            String[] range = kv[0].split("-");
            long first = Long.parseLong(range[0]), last = Long.parseLong(range[range.length - 1]);
            if (offset >= first && offset <= last) return AcknowledgeType.valueOf(kv[1]);
        }
        return AcknowledgeType.ACCEPT;
    }
}
