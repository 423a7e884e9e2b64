import java.io.FileInputStream;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client logging in with OAUTHBEARER (the properties file: OAuthBearerLoginCallbackHandler and the
 * provider's token endpoint): produces N records to a topic, reads them back with a consumer and with a share
 * consumer of a share group, and prints "produced/consumed/shared N".  Args: properties topic group N.
 */
public class OAuthClient {
    public static void main(String[] args) throws Exception {
        Properties base = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            base.load(in);
        }
        String topic = args[1];
        String group = args[2];
        int n = Integer.parseInt(args[3]);
        Properties p = new Properties();
        p.putAll(base);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < n; i++)
                producer.send(new ProducerRecord<>(topic, "java-" + i)).get();
        }
        System.out.println("produced " + n);
        Properties c = new Properties();
        c.putAll(base);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("group.id", group + "-classic");
        c.put("auto.offset.reset", "earliest");
        int consumed = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            while (consumed < n && System.currentTimeMillis() < deadline)
                consumed += consumer.poll(Duration.ofMillis(500)).count();
        }
        System.out.println("consumed " + consumed);
        Properties s = new Properties();
        s.putAll(base);
        s.put("key.deserializer", StringDeserializer.class.getName());
        s.put("value.deserializer", StringDeserializer.class.getName());
        s.put("group.id", group);
        int shared = 0;
        deadline = System.currentTimeMillis() + 60_000;
        try (KafkaShareConsumer<String, String> share = new KafkaShareConsumer<>(s)) {
            share.subscribe(List.of(topic));
            while (shared < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : share.poll(Duration.ofMillis(500)))
                    shared++;
                share.commitSync();
            }
        }
        System.out.println("shared " + shared);
    }
}
