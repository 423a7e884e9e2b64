import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.ArrayList;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A Java client logging in with SASL/GSSAPI: produces N records ("v0"...) to a topic and reads them back
 * (other clients' records, not starting with "v", are not counted).
 * Arguments: bootstrap topic count jaas-config service-name. Prints "OK n" (n records read back) or
 * "ERROR ExceptionClass: message" for the first failure; the JVM reads its krb5.conf from
 * -Djava.security.krb5.conf.
 */
public class KerberosClient {
    public static void main(String[] args) {
        String bootstrap = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("security.protocol", "SASL_PLAINTEXT");
        common.put("sasl.mechanism", "GSSAPI");
        common.put("sasl.jaas.config", args[3]);
        common.put("sasl.kerberos.service.name", args[4]);
        try {
            Properties p = new Properties();
            p.putAll(common);
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            p.put("max.block.ms", "20000");
            p.put("delivery.timeout.ms", "20000");
            p.put("request.timeout.ms", "10000");
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < count; i++)
                    producer.send(new ProducerRecord<>(topic, "v" + i)).get();
            }
            Properties c = new Properties();
            c.putAll(common);
            c.put("key.deserializer", StringDeserializer.class.getName());
            c.put("value.deserializer", StringDeserializer.class.getName());
            c.put("group.id", "kerberos-" + topic);
            c.put("auto.offset.reset", "earliest");
            List<String> got = new ArrayList<>();
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                consumer.subscribe(Collections.singletonList(topic));
                long deadline = System.currentTimeMillis() + 30000;
                while (got.size() < count && System.currentTimeMillis() < deadline)
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200)))
                        if (r.value().startsWith("v"))
                            got.add(r.value());
            }
            System.out.println("OK " + got.size());
        } catch (Throwable t) {
            Throwable root = t;
            while (root.getCause() != null && !(root instanceof org.apache.kafka.common.KafkaException
                    && root.getClass() != org.apache.kafka.common.KafkaException.class))
                root = root.getCause();
            System.out.println("ERROR " + root.getClass().getSimpleName() + ": " + root.getMessage());
        }
    }
}
